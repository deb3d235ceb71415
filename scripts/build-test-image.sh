#!/bin/sh
# Builds ohd-test-agent:dev, the image ohd's Docker tests run (the standin
# agent server, ohctl, and this host's git), without any registry.
# Called by `make test-image`; extra arguments go to the builder
# (e.g. -ref NAME:TAG).
set -eu
cd "$(dirname "$0")/.."
exec go run ./internal/testimage/cmd/build-test-image "$@"
