#!/usr/bin/env bash
# The wall between vgpud's roles, for what Go's internal/ rule does not
# cover: the node role's parts (node/..., kubeletapi/...) never import the
# cluster role's (cluster/..., webhook/...) or the other way round, tests
# included and through any package in between, and the shared contract
# (protocol/...) and the process-wide parts (internal/...) import neither. Each
# role's internal/ packages are already private to it; this also keeps
# the top-level webhook and kubeletapi packages on their sides.
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
declare -A refused=(
	[node]="cluster webhook"
	[kubeletapi]="cluster webhook"
	[cluster]="node kubeletapi"
	[webhook]="node kubeletapi cluster"
	[protocol]="node kubeletapi cluster webhook"
	[internal]="node kubeletapi cluster webhook"
)
# Every package with all it depends on (.Deps) and its tests' imports;
# go list failing fails the check rather than passing it empty.
graph=$(go list -tags e2e,bench,skewnext -f '{{.ImportPath}} {{join .Deps " "}} {{join .TestImports " "}} {{join .XTestImports " "}}' ./...)
fail=0
while read -r pkg imports; do
	rel=${pkg#"$mod"/}
	side=${rel%%/*}
	[ -n "${refused[$side]:-}" ] || continue
	for imp in $imports; do
		[[ $imp == "$mod"/* ]] || continue
		target=${imp#"$mod"/}
		for r in ${refused[$side]}; do
			if [[ $target == "$r" || $target == "$r"/* ]]; then
				echo "role wall: $rel depends on $target ($side may not import $r)" >&2
				fail=1
			fi
		done
	done
done <<<"$graph"
exit $fail
