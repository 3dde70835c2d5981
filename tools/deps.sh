#!/bin/sh
# Installs the Debian packages Metronome needs, and only those that are
# missing. As root it runs apt-get itself; otherwise it prints the exact
# command and fails, so nothing half-works on a machine without the libraries.
set -u

PKGS="pkg-config gcc make libsndfile1-dev libsamplerate0-dev portaudio19-dev
libopenblas-dev libjansson-dev gnuplot-nox sox libsox-fmt-all espeak-ng
python3 python3-numpy groff-base man-db clang libclang-rt-14-dev perl
haproxy prometheus libopus-dev libogg-dev nettle-dev opus-tools python3-websockets
libmsgpack-dev python3-msgpack"

missing=""
for p in $PKGS; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)
    case "$st" in
        *"install ok installed"*) ;;
        *) missing="$missing $p" ;;
    esac
done

[ -z "$missing" ] && exit 0

echo "deps: missing Debian packages:$missing" >&2
cmd="apt-get install -y --no-install-recommends$missing"
if [ "$(id -u)" != 0 ]; then
    echo "deps: run as root:  apt-get update && $cmd" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
# A fresh image has no package lists; a stale one may name versions that are
# gone. Try once as is, then refresh the lists and try again.
if ! apt-get install -y -qq --no-install-recommends $missing >/dev/null 2>&1; then
    apt-get update -qq || { echo "deps: apt-get update failed" >&2; exit 1; }
    apt-get install -y -qq --no-install-recommends $missing ||
        { echo "deps: apt-get install failed:$missing" >&2; exit 1; }
fi
echo "deps: installed:$missing" >&2
