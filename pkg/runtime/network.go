package runtime

import (
	"context"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// IsolatedNetwork is the network ohd serve puts containers on by default:
// a bridge with inter-container communication off, so one conversation's
// agent cannot reach another's inner server (or anything else in another
// container), while every container still reaches the outside and the
// host reaches its published port.
const IsolatedNetwork = "ohd"

// iccOption is the bridge driver's inter-container communication switch.
const iccOption = "com.docker.network.bridge.enable_icc"

// ensureNetwork checks that network name exists, creating IsolatedNetwork
// when it is missing. It warns when containers on the network can reach
// each other.
func (d *Docker) ensureNetwork(ctx context.Context, name string) error {
	res, err := d.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
	if cerrdefs.IsNotFound(err) && name == IsolatedNetwork {
		_, err = d.api.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver:  "bridge",
			Options: map[string]string{iccOption: "false"},
			Labels:  map[string]string{reservedLabelPrefix + "network": "isolated"},
		})
		if err == nil {
			d.log.Info("docker runtime: created the isolated container network", "network", name)
		}
		if err == nil || cerrdefs.IsConflict(err) { // or another ohd made it meanwhile
			res, err = d.api.NetworkInspect(ctx, name, client.NetworkInspectOptions{})
		}
	}
	if cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker runtime: network %q does not exist: create it (docker network create %s), or leave --network at its default %q (created by ohd, containers isolated from each other)", name, name, IsolatedNetwork)
	}
	if err != nil {
		return d.wrap("inspect network", name, err)
	}
	if n := res.Network; n.Driver != "bridge" || n.Options[iccOption] != "false" {
		d.log.Warn("docker runtime: containers on this network can reach each other's inner servers (they still need that conversation's key)",
			"network", name, "driver", n.Driver, iccOption, n.Options[iccOption])
	}
	return nil
}
