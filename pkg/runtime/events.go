package runtime

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/moby/moby/api/types/events"
	"github.com/moby/moby/client"
)

// containerActions are the container events Events delivers; exec,
// attach, resize and health events are noise to a lifecycle owner.
var containerActions = []string{
	"create", "start", "restart", "stop", "kill", "die", "oom", "pause", "unpause", "destroy",
}

// Reconnect backoff of the event stream.
const (
	eventsFirstBackoff = 100 * time.Millisecond
	eventsMaxBackoff   = 5 * time.Second
	eventsHealthyAfter = 5 * time.Second // a stream up this long resets the backoff
)

// Events follows the engine's events for the containers labelled with
// serverID and calls fn for each, until ctx ends (then it returns nil).
//
// It asks the engine for events since the moment Events was called, so an
// event that happens while the stream is being set up is not lost. When
// the stream breaks (the engine restarted, the connection dropped) it logs
// the error, reconnects with backoff (100ms doubling to 5s), asks again for
// the events since the last one it delivered, and then calls fn with an
// Event whose Action is ActionResync: events the engine forgot across a
// restart cannot be replayed, so the receiver should reconcile with List.
// An event may be delivered twice across a reconnect; fn must be
// idempotent.
func (d *Docker) Events(ctx context.Context, serverID string, fn func(Event)) error {
	if serverID == "" {
		return errors.New("follow events: server id is empty")
	}
	since := time.Now()
	backoff := eventsFirstBackoff
	for reconnect := false; ; reconnect = true {
		if reconnect {
			if !sleepCtx(ctx, backoff) {
				return nil
			}
			backoff = min(backoff*2, eventsMaxBackoff)
			if err := d.Ping(ctx); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				d.log.Warn("docker runtime: event stream: engine still unavailable", "host", d.host, "err", err, "retry_in", backoff)
				continue
			}
		}
		began := time.Now()
		err := d.followEvents(ctx, serverID, &since, fn, reconnect)
		if ctx.Err() != nil {
			return nil
		}
		if time.Since(began) > eventsHealthyAfter {
			backoff = eventsFirstBackoff
		}
		d.log.Warn("docker runtime: event stream broke; reconnecting", "host", d.host, "err", err, "retry_in", backoff)
	}
}

// followEvents reads one event stream until it breaks. *since advances
// past each delivered event.
func (d *Docker) followEvents(ctx context.Context, serverID string, since *time.Time, fn func(Event), resync bool) error {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	f := make(client.Filters).
		Add("type", string(events.ContainerEventType)).
		Add("label", LabelServer+"="+serverID).
		Add("event", containerActions...)
	res := d.api.Events(sctx, client.EventsListOptions{
		Since:   since.UTC().Format(time.RFC3339Nano),
		Filters: f,
	})
	if resync {
		// Events returns once the engine answered the request (or it
		// failed): resync only over a stream that is up.
		select {
		case err := <-res.Err:
			return err
		default:
			fn(Event{Action: ActionResync, Time: time.Now()})
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-res.Err:
			if err == nil {
				err = errors.New("stream closed")
			}
			return err
		case m := <-res.Messages:
			ev := Event{
				ContainerID:    m.Actor.ID,
				ConversationID: m.Actor.Attributes[LabelConversation],
				Action:         string(m.Action),
				Time:           time.Unix(0, m.TimeNano),
			}
			if m.TimeNano == 0 {
				ev.Time = time.Unix(m.Time, 0)
			}
			if c, err := strconv.Atoi(m.Actor.Attributes["exitCode"]); err == nil {
				ev.ExitCode = c
			}
			if ev.Time.After(*since) {
				*since = ev.Time.Add(time.Nanosecond)
			}
			fn(ev)
		}
	}
}

// sleepCtx waits d or until ctx ends; it reports whether the wait ran out.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
