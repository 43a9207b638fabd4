#!/usr/bin/env bash
# Builds the Kubernetes control-plane binaries that Rover's tests run against,
# from the Go module proxy, into the folder given as $1 (default testbin/bin).
#
#   testbin/build.sh "$HOME/.cache/rover/testbin-v1.37.2"
#
# Always builds kube-apiserver and etcd (what envtest needs). TESTBIN_EXTRA
# adds more, e.g. "kubectl kube-scheduler kube-controller-manager kwok".
# A binary is skipped when the folder already holds it stamped with the hash
# of this module's go.mod and go.sum, so a second run costs nothing.
# See docs/design/k8s-testing.md.
set -euo pipefail
cd "$(dirname "$0")"
OUT=${1:-$PWD/bin}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

K8S=$(awk '$1=="k8s.io/kubernetes"{print $2; exit}' go.mod)
MINOR=$(echo "$K8S" | cut -d. -f2)
P=k8s.io/component-base/version
C=k8s.io/client-go/pkg/version
LDF="-s -w -X $P.gitVersion=$K8S -X $P.gitMajor=1 -X $P.gitMinor=$MINOR -X $P.gitTreeState=clean \
 -X $C.gitVersion=$K8S -X $C.gitMajor=1 -X $C.gitMinor=$MINOR -X $C.gitTreeState=clean"
STAMP=$(cat go.mod go.sum | sha1sum | cut -c1-40)

build() {
  local name=$1 pkg=$2
  if [ -x "$OUT/$name" ] && [ "$(cat "$OUT/.$name.stamp" 2>/dev/null)" = "$STAMP" ]; then
    return
  fi
  echo "testbin: building $name ($pkg) into $OUT" >&2
  local start=$SECONDS
  rm -f "$OUT/.$name.stamp"
  go build -trimpath -ldflags="$LDF" -o "$OUT/$name" "$pkg"
  echo "$STAMP" >"$OUT/.$name.stamp"
  echo "testbin: built $name in $((SECONDS - start))s" >&2
}

build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver
build etcd go.etcd.io/etcd/server/v3
for x in ${TESTBIN_EXTRA:-}; do
  case $x in
    kwok) build kwok sigs.k8s.io/kwok/cmd/kwok ;;
    kubectl | kube-scheduler | kube-controller-manager) build "$x" "k8s.io/kubernetes/cmd/$x" ;;
    *) echo "testbin: unknown binary $x in TESTBIN_EXTRA (known: kubectl kube-scheduler kube-controller-manager kwok)" >&2; exit 2 ;;
  esac
done
