#!/usr/bin/env bash
# Install what fidelity needs on Debian (system packages, a virtualenv with nox),
# then run the given nox sessions: `scripts/bootstrap.sh demo`, `… web` or `… tests`.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's own Python 3 when there is one: the Debian packages below (venv, headers) are for it,
# and it is built with profile-guided optimization (an interpreter of a version manager, first
# on PATH on some machines, may not be: fidelity diff ran 12% more instructions on one).
# FIDELITY_PYTHON picks another.
python=${FIDELITY_PYTHON:-python3}
if [ -z "${FIDELITY_PYTHON:-}" ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v git >/dev/null || missing+=(git)
command -v prlimit >/dev/null || missing+=(util-linux)
"$python" -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
# the package compiles two C modules (the normalization rules and the entity regex)
command -v gcc >/dev/null || missing+=(gcc)
[ -f /usr/include/stdio.h ] || missing+=(libc6-dev)
"$python" -c 'import os, sysconfig; raise SystemExit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
    || missing+=(python3-dev)
case " $* " in  # real headless Chromium (Debian's; Playwright drives it): report tests, web domain
    *" tests "*|*" web "*|*" benchmarks "*)
        # the browser sandbox runs /usr/bin/chromium itself (a `chromium` elsewhere on PATH,
        # e.g. a snap stub, is not it); its pages need the DejaVu fonts
        [ -x /usr/bin/chromium ] || missing+=(chromium)
        [ -f /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] || missing+=(fonts-dejavu-core)
        [ -f /usr/share/doc/valgrind/html/index.html ] || missing+=(valgrind)  # the docs web site
        [ -f /usr/share/doc/python3.11/html/index.html ] || missing+=(python3.11-doc) ;;  # pydocs site
esac
case " $* " in  # the mcp domain's npm servers (node) and the search domain's corpus (Debian docs)
    *" tests "*|*" mcp "*|*" search "*|*" benchmarks "*)
        command -v node >/dev/null || missing+=(nodejs)
        command -v npm >/dev/null || missing+=(npm)
        [ -f /usr/share/doc/python3.11/html/index.html ] || missing+=(python3.11-doc)
        [ -f /usr/share/dictd/foldoc.index ] || missing+=(dict-foldoc) ;;
esac
case " $* " in  # the os domain's real desktop (Xvfb + AT-SPI + openbox + GTK3 apps); adb client
    *" tests "*|*" desktop "*|*" benchmarks "*)
        for bin in Xvfb openbox dbus-daemon xprop xdotool import mousepad galculator xfce4-terminal adb; do
            command -v "$bin" >/dev/null || { missing+=(xvfb openbox dbus x11-utils xdotool imagemagick \
                mousepad galculator xfce4-terminal adb at-spi2-core fonts-dejavu-core); break; }
        done
        [ -x /usr/libexec/at-spi-bus-launcher ] || missing+=(at-spi2-core)
        /usr/bin/python3 -c 'import pyatspi' 2>/dev/null || missing+=(python3-pyatspi python3-gi gir1.2-atspi-2.0)
        "$python" -c 'import tkinter' 2>/dev/null || missing+=(python3-tk)  # pyautogui's actions need it
        ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1 || missing+=(faketime libfaketime)
        command -v localc >/dev/null || missing+=(libreoffice-calc libreoffice-gtk3) ;;  # slow suite
esac
case " $* " in  # Docker sandbox tests: an engine, and debootstrap for the registry-free base image
    *" tests "*|*" benchmarks "*)
        # The machine may ship a docker CLI with no engine: check for the daemon itself.
        command -v dockerd >/dev/null || missing+=(docker.io)
        command -v debootstrap >/dev/null || missing+=(debootstrap) ;;
esac
if [ "${#missing[@]}" -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "bootstrap: missing Debian packages: ${missing[*]}; run as root or: sudo apt-get install ${missing[*]}" >&2
        exit 2
    fi
    echo "bootstrap: installing ${missing[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

case " $* " in  # start a Docker daemon when none answers (CI runs every Docker test)
    *" tests "*|*" benchmarks "*)
        if ! docker info >/dev/null 2>&1; then
            if [ "$(id -u)" -ne 0 ]; then  # Docker tests then skip (and fail under CI=true)
                echo "bootstrap: no Docker daemon answers; as root: dockerd --storage-driver=overlay2 --iptables=false --bridge=none &" >&2
            else
                echo "bootstrap: starting dockerd (log: /tmp/fidelity-dockerd.log)" >&2
                setsid nohup dockerd --storage-driver=overlay2 --iptables=false --bridge=none \
                    >/tmp/fidelity-dockerd.log 2>&1 </dev/null &
                for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
                if ! docker info >/dev/null 2>&1; then
                    echo "bootstrap: dockerd did not start:" >&2
                    tail -n 5 /tmp/fidelity-dockerd.log >&2
                    exit 1
                fi
            fi
        fi ;;
esac

if [ ! -x .venv/bin/nox ]; then
    "$python" -m venv .venv
    .venv/bin/python -m pip install -q --disable-pip-version-check nox==2026.10.20 uv
fi
exec .venv/bin/nox --no-color -s "$@"
