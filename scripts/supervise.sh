#!/usr/bin/env bash
# supervise.sh CMD...: runs CMD, and again whenever it exits, as systemd
# runs a node's containerd (Restart=always): vgpud's node setup restarts
# containerd by stopping it (docs/install.md, "Node setup"). SIGTERM or
# SIGINT stops CMD and this loop.
child=
stopping=
trap 'stopping=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait "$child"; exit 0' TERM INT
while :; do
	"$@" &
	child=$!
	wait "$child"
	rc=$?
	[ -n "$stopping" ] && exit 0
	echo "supervise: $1 exited ($rc); starting it again in 1 s" >&2
	sleep 1
done
