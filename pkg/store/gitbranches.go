package store

import (
	"encoding/json"
	"fmt"
	"time"

	bolt "go.etcd.io/bbolt"
)

// gitBranch is a record of bucket git_branches: the conversation that
// created a branch through the git relay, and when.
type gitBranch struct {
	Conversation string    `json:"conversation"`
	CreatedAt    time.Time `json:"created_at"`
}

// gitBranchKey is "<host>/<repository> <ref>": neither a host nor a
// repository path nor a ref name holds a space, so keys of one
// repository share the prefix "<host>/<repository> ".
func gitBranchKey(host, repo, ref string) []byte {
	return []byte(host + "/" + repo + " " + ref)
}

// RecordGitBranches records that conversation id created refs in
// repository repo of host (the path as the relay was asked for it)
// through the git relay, replacing any earlier creator of the same refs
// (a branch deleted on the host and created again is its new creator's).
func (s *Store) RecordGitBranches(id, host, repo string, refs []string) error {
	if len(refs) == 0 {
		return nil
	}
	v, err := json.Marshal(gitBranch{Conversation: id, CreatedAt: time.Now().UTC()})
	if err != nil {
		return err
	}
	err = s.db.Update(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGitBranches)
		for _, ref := range refs {
			if err := b.Put(gitBranchKey(host, repo, ref), v); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record git branches of %s on %s/%s: %w", id, host, repo, err)
	}
	return nil
}

// GitBranchCreators returns, of refs in repository repo of host, those a
// conversation created through the git relay, each with that
// conversation's id.
func (s *Store) GitBranchCreators(host, repo string, refs []string) (map[string]string, error) {
	out := map[string]string{}
	err := s.db.View(func(tx *bolt.Tx) error {
		b := tx.Bucket(bucketGitBranches)
		for _, ref := range refs {
			v := b.Get(gitBranchKey(host, repo, ref))
			if v == nil {
				continue
			}
			var g gitBranch
			if err := json.Unmarshal(v, &g); err != nil {
				return fmt.Errorf("%s: %w", gitBranchKey(host, repo, ref), err)
			}
			out[ref] = g.Conversation
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("git branches of %s/%s: %w", host, repo, err)
	}
	return out, nil
}

// deleteGitBranches removes the records of the branches conversation id
// created, in the transaction that removes its record: a branch whose
// creator is gone is nobody's.
func deleteGitBranches(tx *bolt.Tx, id string) error {
	b := tx.Bucket(bucketGitBranches)
	var keys [][]byte
	err := b.ForEach(func(k, v []byte) error {
		var g gitBranch
		if json.Unmarshal(v, &g) == nil && g.Conversation == id {
			keys = append(keys, append([]byte(nil), k...))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
