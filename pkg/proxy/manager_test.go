package proxy

import (
	"context"

	"github.com/ohd-dev/ohd/pkg/conversation"
	"github.com/ohd-dev/ohd/pkg/store"
)

// The orchestrator must keep the signatures the proxy relies on. (List is
// checked where the daemon builds the proxy: the Manager gains it there.)
var _ interface {
	Create(ctx context.Context, req conversation.CreateRequest) (store.Conversation, error)
	Get(id string) (store.Conversation, error)
	Target(ctx context.Context, id string) (conversation.Target, error)
	Remove(ctx context.Context, id string, opts conversation.RemoveOptions) (store.Conversation, error)
	Touch(id string)
} = (*conversation.Manager)(nil)
