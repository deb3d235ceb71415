package daemon

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ohd-dev/ohd/pkg/proxy"
)

// upstreamCredential is the systemd credential holding the upstream's
// OH_SECRET_KEY (LoadCredential=ohd-upstream-secret-key:...).
const upstreamCredential = "ohd-upstream-secret-key"

// upstreamOptions sets the conversation API's upstream (--upstream) and
// the upstream's secret key (--upstream-secret-key-file, else the
// systemd credential).
func (d *Daemon) upstreamOptions(o *proxy.Options) error {
	o.CORSOrigins, o.WorkspaceRoots = d.cfg.CORSOrigins, d.cfg.WorkspaceRoots
	if d.cfg.Upstream != "" {
		u, err := ParseUpstream(d.cfg.Upstream, d.cfg.UpstreamAllowRemote)
		if err != nil {
			return err
		}
		o.Upstream = u
	}
	path := d.cfg.UpstreamSecretKeyFile
	if path == "" {
		if dir := d.cfg.Getenv("CREDENTIALS_DIRECTORY"); dir != "" {
			if p := filepath.Join(dir, upstreamCredential); fileExists(p) {
				path = p
			}
		}
	}
	if path == "" {
		return nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read the upstream's secret key: %w", err)
	}
	key := bytes.TrimSpace(b)
	if len(key) == 0 {
		return fmt.Errorf("the upstream's secret key file %s is empty: put the upstream agent server's OH_SECRET_KEY in it", path)
	}
	o.UpstreamSecretKey = key
	if o.Upstream == nil {
		d.log.Warn("an upstream secret key was given without --upstream: Agent Canvas needs the upstream's settings routes")
	}
	return nil
}
