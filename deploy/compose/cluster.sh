#!/usr/bin/env bash
# Runs the three-voter compose cluster of docker-compose.yml: up, down,
# status, env, logs. `make cluster` and `make cluster-down` call it.
set -euo pipefail

usage() {
	cat <<'USAGE'
Usage: deploy/compose/cluster.sh COMMAND

Commands:
  up      start three voter nodes (n1, n2, n3) on a private Docker network,
          all mutual TLS (a CA and certificates are made on first up), wait
          until every node serves and the cluster has a leader, and print
          what env prints (stdout; progress goes to stderr):
          eval "$(deploy/compose/cluster.sh up)" (or make -s cluster)
  env     print, without touching Docker, the shell lines that point the
          shoal CLI at the cluster: export SHOAL_TLS_CERT=..., SHOAL_TLS_KEY=,
          SHOAL_TLS_CA= (the admin client certificate; with TLS only) and,
          last, export SHOAL_ENDPOINT=a,b,c; values single-quoted, for eval
          in sh, bash or zsh: eval "$(deploy/compose/cluster.sh env)"
  down    remove the node containers, every sandbox container the cluster
          made (by their shoal.dev/cluster label), the network, the
          nodes' data volumes and the cluster's certificates
  status  the node containers, the endpoints and `shoal cluster status`
  logs    the nodes' logs (arguments go to docker-compose logs: -f, n2, ...)

Environment:
  SHOAL_CLUSTER          compose project name (default: shoal); one host can
                         run several clusters under different names
  SHOAL_CLUSTER_PORT     API port of n1 on 127.0.0.1 (default: 7451); n2 and
                         n3 take the next two
  SHOAL_CLUSTER_TIMEOUT  seconds `up` waits for the cluster (default: 90)
  SHOAL_CLUSTER_TLS      1 (default): mutual TLS everywhere; 0: plaintext on the
                         private network (read by `up` only)
  SHOAL_NODE_TTL, SHOAL_LEASE_TTL, SHOAL_FENCE_MARGIN, SHOAL_LOG_LEVEL
                         the nodes' --node-ttl, --lease-ttl, --fence-margin
                         and --log-level (defaults: 10s, 10s, 0s = one TTL,
                         info); read by `up` only
  SHOAL_NODE_IMAGE       the node image (default: shoal/node:dev, make node-image)
  SHOAL_DOCKER_SOCK      the host engine's socket (default: /var/run/docker.sock)

The images are not built here: `make cluster` builds them first
(make image node-image). Nothing is pulled from a registry.
USAGE
}

die() {
	echo "cluster.sh: $*" >&2
	exit 1
}
say() { echo "cluster.sh: $*" >&2; }

here=$(cd "$(dirname "$0")" && pwd)
project=${SHOAL_CLUSTER:-shoal}
port=${SHOAL_CLUSTER_PORT:-7451}
timeout=${SHOAL_CLUSTER_TIMEOUT:-90}
node_image=${SHOAL_NODE_IMAGE:-shoal/node:dev}
sandbox_image=shoal/sandbox:dev
nodes=(n1 n2 n3)
# The cluster id (shoal.dev/cluster on every sandbox container) is recorded
# here by `up`, so that `down` finds the sandboxes even when no node answers
# any more (all stopped, or no quorum).
state_dir=${XDG_STATE_HOME:-$HOME/.local/state}/shoal/compose
state_file=$state_dir/$project.cluster-id
# The cluster's CA and certificates (shoal certs init), made by `up` if
# absent and removed by `down`: admin.crt/.key is the client certificate
# `up` prints for you.
pki_dir=$state_dir/$project-pki
export SHOAL_PKI_DIR=$pki_dir
# The nodes' egress sockets (--egress-dir): the host's engine bind-mounts
# each sandbox's into its egress sidecar, so each node has it at the same
# path as the host. Made by `up`, removed by `down`.
egress_dir=$state_dir/$project-egress
export SHOAL_EGRESS_DIR=$egress_dir
# SHOAL_CLUSTER_TLS=0 runs the same cluster in plaintext (--insecure on its
# private network): what `up` then prints is the endpoints only.
tls=${SHOAL_CLUSTER_TLS:-1}
[[ $tls == 0 || $tls == 1 ]] || die "SHOAL_CLUSTER_TLS=$tls: use 1 (mutual TLS, the default) or 0 (plaintext)"
if [ "$tls" = 1 ]; then
	export SHOAL_ETCD_SCHEME=https SHOAL_INSECURE=false SHOAL_TLS_CA_IN=/etc/shoal/pki/ca.crt
	for n in n1 n2 n3; do
		export "SHOAL_TLS_CERT_${n^^}=/etc/shoal/pki/$n.crt" "SHOAL_TLS_KEY_${n^^}=/etc/shoal/pki/$n.key"
	done
else
	export SHOAL_ETCD_SCHEME=http SHOAL_INSECURE=true SHOAL_TLS_CA_IN=
	for n in n1 n2 n3; do
		export "SHOAL_TLS_CERT_${n^^}=" "SHOAL_TLS_KEY_${n^^}="
	done
fi

[[ $project =~ ^[a-z0-9][a-z0-9_-]*$ ]] || die "SHOAL_CLUSTER=$project: use lower-case letters, digits, '-' and '_' (a compose project name)"
if ! [[ $port =~ ^[0-9]+$ ]] || ((port < 1 || port > 65533)); then
	die "SHOAL_CLUSTER_PORT=$port: not a port number (n1 takes it, n2 and n3 the next two)"
fi
[[ $timeout =~ ^[0-9]+$ ]] || die "SHOAL_CLUSTER_TIMEOUT=$timeout: not a number of seconds"

export SHOAL_PORT_N1=$port SHOAL_PORT_N2=$((port + 1)) SHOAL_PORT_N3=$((port + 2))
endpoints=127.0.0.1:$SHOAL_PORT_N1,127.0.0.1:$SHOAL_PORT_N2,127.0.0.1:$SHOAL_PORT_N3

# docker-compose v1 (Debian 12's package), or the v2 plugin where that is
# what the host has: the file and every command here work with both.
if command -v docker-compose >/dev/null; then
	compose_cmd=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
	compose_cmd=(docker compose)
else
	compose_cmd=()
fi
compose() { "${compose_cmd[@]}" --project-name "$project" --file "$here/docker-compose.yml" "$@"; }

preflight() {
	command -v docker >/dev/null || die "docker not found; install the Docker engine (apt-get install docker.io)"
	[ ${#compose_cmd[@]} -gt 0 ] || die "docker-compose not found; install it with: apt-get install docker-compose"
	docker info >/dev/null 2>&1 || die "no Docker engine answers (is dockerd running, and may you use its socket?)"
}

# container SERVICE: the id of the project's container of SERVICE, running
# or not; empty if there is none.
container() {
	docker ps -aq --filter "label=com.docker.compose.project=$project" \
		--filter "label=com.docker.compose.service=$1"
}

running() { [ "$(docker inspect -f '{{.State.Running}}' "$1" 2>/dev/null)" = true ]; }

# shoal CONTAINER ARGS...: the shoal CLI inside a node container, against
# that node's own API. The image carries the binary, so the host needs none.
shoal_in() {
	local c=$1
	shift
	docker exec "$c" /usr/local/bin/shoal --endpoint 127.0.0.1:7443 "$@"
}

# cluster_id CONTAINER: the cluster id as the node reports it, or nothing.
cluster_id() {
	shoal_in "$1" cluster status -o json 2>/dev/null |
		sed -n 's/.*"cluster_id": *"\([0-9a-f]\{1,\}\)".*/\1/p' | head -n 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

up() {
	preflight
	local img
	for img in "$node_image" "$sandbox_image"; do
		docker image inspect "$img" >/dev/null 2>&1 ||
			die "image $img is missing on this engine; build it with: make image node-image (or run make cluster)"
	done
	mkdir -p "$egress_dir/n1" "$egress_dir/n2" "$egress_dir/n3"
	if [ ! -s "$pki_dir/ca.crt" ]; then
		say "making the cluster's CA and certificates in $pki_dir"
		mkdir -p "$pki_dir"
		chmod 700 "$pki_dir"
		# The node image's own CLI, as the invoking user: the keys are
		# the user's, 0600.
		docker run --rm --user "$(id -u):$(id -g)" --network none -v "$pki_dir:/pki" "$node_image" \
			certs init --dir /pki --nodes n1,n2,n3 >&2 ||
			die "shoal certs init failed (above)"
	fi
	local mode="mutual TLS"
	[ "$tls" = 1 ] || mode="plaintext"
	say "starting cluster $project (API on $endpoints, $mode)"
	compose up --detach --no-build >&2

	local deadline=$((SECONDS + timeout)) n c id status pending=""
	while :; do
		pending=""
		for n in "${nodes[@]}"; do
			c=$(container "$n")
			[ -n "$c" ] || die "no container for node $n; see: $0 logs"
			if ! running "$c"; then
				compose logs --no-color --tail 30 "$n" >&2 || true
				die "node $n exited (above: its last log lines)"
			fi
			if ! shoal_in "$c" node get "$n" >/dev/null 2>&1; then
				pending+=" $n(not serving)"
				continue
			fi
			local p=SHOAL_PORT_${n^^}
			port_open "${!p}" || pending+=" $n(port ${!p} not reachable)"
		done
		if [ -z "$pending" ]; then
			status=$(shoal_in "$c" cluster status -o json 2>/dev/null || true)
			if [ "$(grep -c '"healthy": *true' <<<"$status")" -ne ${#nodes[@]} ]; then
				pending=" etcd(not every member healthy)"
			elif ! grep -q '"leader_node": *"[a-z0-9]' <<<"$status"; then
				pending=" leader(none elected yet)"
			else
				break
			fi
		fi
		if ((SECONDS >= deadline)); then
			compose ps >&2 || true
			die "cluster $project not ready after ${timeout}s, waiting for:$pending (logs: $0 logs)"
		fi
		sleep 0.5 # poll interval
	done
	id=$(sed -n 's/.*"cluster_id": *"\([0-9a-f]\{1,\}\)".*/\1/p' <<<"$status" | head -n 1)
	[ -n "$id" ] || die "cluster status named no cluster id"
	# Appended: a project brought up again after its volumes were removed
	# by hand is a new cluster, and the old one's sandboxes are still due.
	mkdir -p "$state_dir"
	grep -qxF "$id" "$state_file" 2>/dev/null || echo "$id" >>"$state_file"
	say "cluster $project is up: n1 127.0.0.1:$SHOAL_PORT_N1, n2 127.0.0.1:$SHOAL_PORT_N2, n3 127.0.0.1:$SHOAL_PORT_N3 (cluster id $id)"
	local down_cmd="make cluster-down"
	[ "$project" = shoal ] || down_cmd="SHOAL_CLUSTER=$project make cluster-down"
	say "use it with the exports below (the admin certificate): eval \"\$(make -s cluster)\" sets them; remove it with: $down_cmd"
	exports
}

# quote VALUE: VALUE single-quoted for sh, bash and zsh alike.
quote() {
	local q="'\\''"
	printf "'%s'" "${1//\'/$q}"
}

# exports: the lines that point the shoal CLI at this cluster, for eval.
exports() {
	if [ "$tls" = 1 ]; then
		echo "export SHOAL_TLS_CERT=$(quote "$pki_dir/admin.crt")"
		echo "export SHOAL_TLS_KEY=$(quote "$pki_dir/admin.key")"
		echo "export SHOAL_TLS_CA=$(quote "$pki_dir/ca.crt")"
	fi
	echo "export SHOAL_ENDPOINT=$(quote "$endpoints")"
}

env_cmd() {
	if [ "$tls" = 1 ] && [ ! -s "$pki_dir/admin.crt" ]; then
		die "no certificates in $pki_dir: is cluster $project up? (make cluster)"
	fi
	exports
}

down() {
	preflight
	# Which cluster's sandboxes: what up recorded, and what any live node
	# says (a cluster brought up by hand, or a lost state file).
	local ids=() n c id
	[ -r "$state_file" ] && mapfile -t ids <"$state_file"
	for n in "${nodes[@]}"; do
		c=$(container "$n")
		if [ -n "$c" ] && running "$c"; then
			id=$(cluster_id "$c")
			[ -n "$id" ] && ids+=("$id") && break
		fi
	done
	# Stop the nodes first, so that none makes a container after the sweep.
	say "removing cluster $project: node containers, network, volumes"
	compose down --volumes --remove-orphans --timeout 10 >&2

	local left
	for id in $(printf '%s\n' "${ids[@]}" | sort -u); do
		left=$(docker ps -aq --filter label=shoal.dev/egress-for --filter "label=shoal.dev/cluster=$id")
		# shellcheck disable=SC2086 # one id a word
		[ -z "$left" ] || docker rm --force $left >/dev/null
		left=$(docker ps -aq --filter label=shoal.dev/managed=true --filter "label=shoal.dev/cluster=$id")
		if [ -n "$left" ]; then
			say "removing $(wc -w <<<"$left") sandbox container(s) of cluster $id"
			# shellcheck disable=SC2086 # one id a word
			docker rm --force --volumes $left >/dev/null
		fi
	done
	if [ ${#ids[@]} -eq 0 ]; then
		# Without a cluster id, sandboxes of n1..n3 may be this cluster's
		# or another's on this engine: name them, touch none.
		for n in "${nodes[@]}"; do
			left=$(docker ps -a --filter label=shoal.dev/managed=true --filter "label=shoal.dev/node=$n" \
				--format '{{.Names}} (cluster {{.Label "shoal.dev/cluster"}})')
			[ -z "$left" ] || say "warning: cluster id unknown; sandbox containers of a node $n, maybe this cluster's: $left (docker rm -f NAME)"
		done
	fi
	rm -f "$state_file"
	rm -rf "$pki_dir" "$egress_dir"

	left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
	[ -z "$left" ] || die "containers of project $project are left: $left"
	say "cluster $project removed"
}

status() {
	preflight
	compose ps
	exports
	local n c
	for n in "${nodes[@]}"; do
		c=$(container "$n")
		if [ -n "$c" ] && running "$c"; then
			shoal_in "$c" cluster status && return 0
		fi
	done
	echo "no node of cluster $project answers"
	return 1
}

case "${1:-}" in
up | down | status)
	[ $# -eq 1 ] || {
		usage >&2
		exit 2
	}
	"$1"
	;;
env)
	[ $# -eq 1 ] || {
		usage >&2
		exit 2
	}
	env_cmd
	;;
logs)
	shift
	preflight
	compose logs "$@"
	;;
-h | --help | help)
	usage
	;;
*)
	usage >&2
	exit 2
	;;
esac
