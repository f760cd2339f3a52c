#!/bin/bash
# remote.ranks.netns: rank 0 and the holder in two network namespaces joined by a veth pair, UCX over TCP on the
# veth ends: the TCP path crosses a real network stack (not loopback). Usage: netns.sh BENCH WORKDIR
# Skipped (exit 77, with the reason) where this user may not create namespaces or iproute2 is missing.
set -u
bench=$1 work=$2
command -v ip >/dev/null || { echo "skipped: ip (iproute2) not installed"; exit 77; }
a=kvfr_a_$$ b=kvfr_b_$$
if ! err=$(ip netns add $a 2>&1); then
  echo "skipped: this user may not create network namespaces (ip netns add: $err)"
  exit 77
fi
cleanup() { ip netns del $a 2>/dev/null; ip netns del $b 2>/dev/null; }
trap cleanup EXIT
# A /30 of the 198.18.0.0/15 benchmarking range: not routed anywhere, unlikely to clash with a host's networks.
net=198.18.$(( $$ % 250 )).
# Each rank joins its namespace after MPI_Init (KVF_REMOTE_NETNS): started inside one, its PMIx client could not
# reach mpirun's server on the host's loopback.
ip netns add $b &&
  ip link add va$$ type veth peer name vb$$ &&
  ip link set va$$ netns $a && ip link set vb$$ netns $b &&
  ip -n $a addr add ${net}1/30 dev va$$ && ip -n $b addr add ${net}2/30 dev vb$$ &&
  ip -n $a link set va$$ up && ip -n $b link set vb$$ up &&
  ip -n $a link set lo up && ip -n $b link set lo up || { echo "FAIL: could not set up the veth pair"; exit 1; }
# No ping on minimal images: the bench itself is the connectivity check (its rows must name the veth device).

root=()
[ "$(id -u)" -eq 0 ] && root=(--allow-run-as-root)
timeout 50 mpirun "${root[@]}" --oversubscribe -q \
  -np 1 -x UCX_TLS=tcp -x UCX_NET_DEVICES=va$$ -x KVF_REMOTE_NETNS=$a "$bench" --quick --ops read,write --sizes 256KiB,2MiB \
    --tokens 16 --granularities page,layer --no-perftest --out "$work/run" : \
  -np 1 -x UCX_TLS=tcp -x UCX_NET_DEVICES=vb$$ -x KVF_REMOTE_NETNS=$b "$bench" --quick --ops read,write --sizes 256KiB,2MiB \
    --tokens 16 --granularities page,layer --no-perftest > "$work/log" 2>&1
rc=$?
tail -n 12 "$work/log"
[ $rc -eq 0 ] || { echo "FAIL: exit $rc"; exit 1; }
python3 - "$work/run/cases.csv" "va$$" <<'PY' || exit 1
import csv, sys
# gpu_memory and lockstep (3 ranks or more) rows are skipped with their reason on two ranks.
rows = [r for r in csv.DictReader(open(sys.argv[1])) if not r["case"].startswith(("gpu_memory/", "lockstep/"))]
assert len(rows) >= 8, f"{len(rows)} rows"
for r in rows:
    assert r["verified"] == "yes", f"{r['case']}: verified={r['verified']}"
    assert f"tcp/{sys.argv[2]}" in r["note"], f"{r['case']}: not over the veth: {r['note'][:160]}"
print(f"{len(rows)} verified rows over tcp/{sys.argv[2]} between two network namespaces")
PY
echo "PASS: netns"
