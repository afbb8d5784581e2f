#!/bin/sh
# Install or uninstall npu-watchdog on one node, idempotently.
#
#   scripts/install.sh install   [options]
#   scripts/install.sh uninstall [options]
#
# install:   a dedicated virtualenv under PREFIX/venv (never the training environment: the package
#            is named `watchdog`, which clashes with an unrelated PyPI library), the README next to
#            it (the unit's Documentation=), the example config as SYSCONFDIR/config.yaml.example,
#            SYSCONFDIR/config.yaml only if there is none yet (an existing config is never touched),
#            the systemd unit in UNITDIR with ExecStart pointing at the venv; then, when systemd is
#            PID 1 and ROOT is /, `systemctl daemon-reload`, `enable`, and `try-restart` (an upgrade
#            restarts a running daemon; a first install waits for you to edit the config and start it).
# uninstall: stops and disables the unit (systemd, ROOT /), removes the unit, the venv, the README
#            and the example config. The config and the state directory stay.
#
# Options (also from the environment: DESTDIR, PREFIX, SYSCONFDIR, UNITDIR, PYTHON):
#   --root DIR        install into DIR as a self-contained tree (tests, images built in place).
#                     A virtualenv cannot be moved, so every path written (unit ExecStart, -c) points
#                     inside DIR, where things really are. systemctl is never called with a root.
#   --prefix DIR      default /opt/npu-watchdog
#   --sysconfdir DIR  default /etc/npu-watchdog
#   --unitdir DIR     default /etc/systemd/system
#   --python EXE      the interpreter the venv is made from (CPython 3.7-3.13; from a bundle, one
#                     it has wheels for, listed in its PYTHONS file). Default: the newest of
#                     python3.13 ... python3.7, python3 on PATH that fits. When none fits, nothing
#                     is made: the message names what to install (the distribution's package).
#   --wheelhouse DIR  install offline from a directory of wheels (pip --no-index --find-links DIR),
#                     for nodes without access to a package index
#   --source DIR      the source tree to install, default: the directory above this script (in
#                     an unpacked bundle, the script's own directory).
#                     An unpacked offline bundle (`make bundle`) is such a tree too: its wheels/
#                     folder holds the daemon, the heartbeat package and every dependency, and
#                     install.sh then installs from it alone (as --wheelhouse DIR/wheels)
#   --no-systemctl    never call systemctl
set -eu

usage() {
    sed -n '2,/^set -eu/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2
    exit 2
}

die() { echo "install.sh: $*" >&2; exit 1; }
say() { echo "npu-watchdog: $*"; }

[ $# -ge 1 ] || usage
action=$1; shift
case "$action" in install|uninstall) ;; -h|--help) usage ;; *) echo "unknown action: $action" >&2; usage ;; esac

ROOT=${DESTDIR:-}
PREFIX=${PREFIX:-/opt/npu-watchdog}
SYSCONFDIR=${SYSCONFDIR:-/etc/npu-watchdog}
UNITDIR=${UNITDIR:-/etc/systemd/system}
PYTHON=${PYTHON:-}
# The Pythons the daemon runs on (pyproject.toml's requires-python; tests/e2e/test_pythons.py runs each).
PY_OLDEST=3.7
PY_NEWEST=3.13
WHEELHOUSE=
# From a checkout the tree is the folder above scripts/; in an unpacked bundle, the script's own.
if [ -d "$(dirname "$0")/wheels" ]; then SOURCE=$(cd "$(dirname "$0")" && pwd); else SOURCE=$(cd "$(dirname "$0")/.." && pwd); fi
USE_SYSTEMCTL=1

while [ $# -gt 0 ]; do
    case "$1" in
        --root) ROOT=$2; shift 2 ;;
        --prefix) PREFIX=$2; shift 2 ;;
        --sysconfdir) SYSCONFDIR=$2; shift 2 ;;
        --unitdir) UNITDIR=$2; shift 2 ;;
        --python) PYTHON=$2; shift 2 ;;
        --wheelhouse) WHEELHOUSE=$2; shift 2 ;;
        --source) SOURCE=$2; shift 2 ;;
        --no-systemctl) USE_SYSTEMCTL=0; shift ;;
        -h|--help) usage ;;
        *) echo "unknown option: $1" >&2; usage ;;
    esac
done

# Absolute paths only: relative ones would depend on the caller's cwd, and an empty one could make
# the removal below point at /.
for v in "$PREFIX" "$SYSCONFDIR" "$UNITDIR"; do
    case "$v" in /?*) ;; *) die "paths must be absolute and not /: got '$v'" ;; esac
done
if [ -n "$ROOT" ]; then
    case "$ROOT" in /*) ;; *) ROOT=$(pwd)/$ROOT ;; esac
    ROOT=${ROOT%/}
fi

VENV=$ROOT$PREFIX/venv
ETC=$ROOT$SYSCONFDIR
UNIT=$ROOT$UNITDIR/npu-watchdog.service

# "3.11" for an interpreter that runs, nothing otherwise.
py_version() {
    "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null
}

# Whether version $1 is older than $2 (both MAJOR.MINOR).
older() {
    [ "${1%%.*}" -lt "${2%%.*}" ] || { [ "${1%%.*}" -eq "${2%%.*}" ] && [ "${1#*.}" -lt "${2#*.}" ]; }
}

# What this install can use, for the messages: a bundle's PYTHONS file, else the supported range.
usable_pythons() {
    if [ "$BUNDLE" = 1 ] && [ -f "$SOURCE/PYTHONS" ]; then
        echo "this bundle has wheels for Python $(tr '\n' ' ' <"$SOURCE/PYTHONS" | sed 's/ *$//')"
    else
        echo "npu-watchdog runs on Python $PY_OLDEST-$PY_NEWEST"
    fi
}

# Why interpreter $1 does not fit (empty when it does).
misfit() {
    v=$(py_version "$1") || v=
    if [ -z "$v" ]; then echo "$1 is missing or is not a working Python"; return; fi
    if older "$v" "$PY_OLDEST"; then echo "$1 is Python $v, older than $PY_OLDEST"; return; fi
    if [ "$BUNDLE" = 1 ] && [ -f "$SOURCE/PYTHONS" ]; then
        grep -qx "$v" "$SOURCE/PYTHONS" || { echo "$1 is Python $v, which this bundle has no wheels for"; return; }
    elif older "$PY_NEWEST" "$v"; then
        echo "$1 is Python $v, newer than $PY_NEWEST (not supported yet)"; return
    fi
    "$1" -c 'import ensurepip, venv' >/dev/null 2>&1 || echo "$1 (Python $v) has no venv module"
}

# The distribution's package to install (from /etc/os-release): for Python $1's venv module when
# $1 is given, else for a fitting python3.
package_hint() {
    # shellcheck disable=SC1091
    id=$( (. /etc/os-release 2>/dev/null && echo "${ID:-} ${ID_LIKE:-}") ) || id=
    # shellcheck disable=SC1091
    major=$( (. /etc/os-release 2>/dev/null && echo "${VERSION_ID:-}" | cut -d. -f1) ) || major=
    case " $id " in
        *" debian "*|*" ubuntu "*)
            if [ -n "${1:-}" ]; then echo "apt-get install python$1-venv"
            elif v=$(py_version python3) && [ -n "$v" ] && older "$v" "$PY_OLDEST"; then echo "apt-get install python3.8 python3.8-venv"
            else echo "apt-get install python3 python3-venv"; fi ;;
        *" openEuler "*|*" openeuler "*|*" euleros "*|*" kylin "*|*" uos "*) echo "yum install python3" ;;
        *" rhel "*|*" centos "*|*" fedora "*)
            case "$major" in
                7) echo "yum install rh-python38, then --python /opt/rh/rh-python38/root/usr/bin/python3.8" ;;
                8) echo "dnf install python39" ;;
                *) echo "dnf install python3" ;;
            esac ;;
        *" suse "*|*" sles "*|*" opensuse "*) echo "zypper install python311" ;;
        *) echo "your distribution's python3 package with its venv module" ;;
    esac
}

# Pick the interpreter before anything is made: --python (or PYTHON) when given, else the newest on
# PATH that fits. Stops with one line saying what to install when none does.
pick_python() {
    if [ -n "$PYTHON" ]; then
        why=$(misfit "$PYTHON")
        case "$why" in
            "") return ;;
            *"no venv module") die "$why: install it ($(package_hint "$(py_version "$PYTHON")")) and run this again" ;;
            *) die "$why; $(usable_pythons): install one ($(package_hint)) and pass --python /path/to/it" ;;
        esac
    fi
    tried=
    for cand in python3.13 python3.12 python3.11 python3.10 python3.9 python3.8 python3.7 python3; do
        exe=$(command -v "$cand" 2>/dev/null) || continue
        why=$(misfit "$exe")
        if [ -z "$why" ]; then PYTHON=$exe; say "using $PYTHON (Python $(py_version "$PYTHON"))"; return; fi
        tried="$tried; $why"
    done
    die "no fitting Python on PATH${tried:+ (${tried#; })}; $(usable_pythons): install one ($(package_hint)) and run this again"
}

# systemctl only on the live system: no --root, systemd is PID 1 (the sd_booted() test), and not
# disabled by option.
systemd_live() {
    [ "$USE_SYSTEMCTL" = 1 ] && [ -z "$ROOT" ] && [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1
}

# pip into the venv: from the wheelhouse alone when there is one, else from the package index.
pip_install() {
    if [ -n "$WHEELHOUSE" ]; then
        "$VENV/bin/pip" install --quiet --disable-pip-version-check --no-index --find-links "$WHEELHOUSE" --upgrade "$@"
    else
        "$VENV/bin/pip" install --quiet --disable-pip-version-check --upgrade "$@"
    fi
}

# The daemon and the heartbeat package from an unpacked offline bundle: prebuilt wheels only.
# The bundle's own two wheels are reinstalled even at the same version (a bundle built from a
# newer checkout keeps the version number: an upgrade must not keep the old code); the RE2 engine
# is left out only when the bundle has no wheel of it for this Python, never on another error
# (a damaged wheel fails the install, naming pip's error).
install_from_bundle() {
    tag=$("$VENV/bin/python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    extra="[fast]"
    if ! ls "$WHEELHOUSE"/google_re2-*-"$tag"-*.whl >/dev/null 2>&1; then
        say "warning: the bundle has no google-re2 wheel for $tag: log rules will run on the slow fallback engine"
        extra=""
    fi
    pip_install --only-binary :all: "npu-watchdog$extra" npu-watchdog-heartbeat \
        || die "installing from the bundle failed (see pip's error above; scripts/bundle.py check tells what is missing)"
    pip_install --only-binary :all: --force-reinstall --no-deps npu-watchdog npu-watchdog-heartbeat \
        || die "reinstalling the daemon's own wheels from the bundle failed"
}

install_from_source() {
    # Build from a clean copy: an in-tree build leaves build/ behind, whose stale modules (deleted
    # from the source since) would be installed again next time.
    stage=$(mktemp -d "${TMPDIR:-/tmp}/npu-watchdog-src.XXXXXX")
    trap 'rm -rf "$stage"' EXIT
    cp -R "$SOURCE/pyproject.toml" "$SOURCE/README.md" "$SOURCE/LICENSE" "$SOURCE/watchdog" "$stage/"
    find "$stage" -name __pycache__ -type d -prune -exec rm -rf {} +
    # The commit it is built from, for `--version` and the build-info metric (watchdog/release.py).
    if commit=$(git -C "$SOURCE" rev-parse --verify HEAD 2>/dev/null); then
        echo "$commit" >"$stage/watchdog/COMMIT"
    fi
    # The `fast` extra (the RE2 engine for the log rules) where a wheel exists for this platform and
    # Python; never built from source. Without it the rules run on the slow fallback engine, which
    # the daemon, its status and `doctor` then say.
    if ! pip_install --only-binary google-re2 "${stage}[fast]"; then
        say "warning: no google-re2 wheel for this platform: log rules will run on the slow fallback engine"
        pip_install "$stage"
    fi
    # The trainer-side heartbeat package too (dependency-free, its own import name): the demo's
    # simulated ranks use it, and `pip download`-free installs into training envs can copy the wheel.
    cp -R "$SOURCE/contrib/heartbeat" "$stage/heartbeat"
    find "$stage/heartbeat" -name __pycache__ -type d -prune -exec rm -rf {} +
    pip_install "$stage/heartbeat"
    rm -rf "$stage"
    trap - EXIT
}

do_install() {
    # An unpacked offline bundle holds wheels/ and no source: installed with no package index.
    BUNDLE=0
    if [ ! -d "$SOURCE/watchdog" ] && [ -d "$SOURCE/wheels" ]; then
        BUNDLE=1
        WHEELHOUSE=${WHEELHOUSE:-$SOURCE/wheels}
    elif [ ! -f "$SOURCE/pyproject.toml" ] || [ ! -d "$SOURCE/watchdog" ]; then
        die "no npu-watchdog source tree (or unpacked bundle) at $SOURCE"
    fi
    if [ "$BUNDLE" = 1 ]; then
        case "$(basename "$SOURCE")" in
            *-linux-x86_64|*-linux-aarch64)
                [ "${SOURCE##*-linux-}" = "$(uname -m)" ] || die "this bundle is for ${SOURCE##*-linux-}, this machine is $(uname -m)" ;;
        esac
    fi
    pick_python

    umask 022
    mkdir -p "$ROOT$PREFIX"
    # Recreate a venv whose interpreter is gone (e.g. the system Python was upgraded), or is not
    # the one picked (a bundle without wheels for it, or --python naming another).
    if [ -d "$VENV" ] && ! "$VENV/bin/python" -c 'import sys' >/dev/null 2>&1; then
        say "virtualenv $VENV is broken; recreating it"
        rm -rf "$VENV"
    elif [ -x "$VENV/bin/python" ] && [ "$(py_version "$VENV/bin/python")" != "$(py_version "$PYTHON")" ]; then
        say "virtualenv $VENV is Python $(py_version "$VENV/bin/python"), not $(py_version "$PYTHON"); recreating it"
        rm -rf "$VENV"
    fi
    if [ ! -x "$VENV/bin/python" ]; then
        say "creating virtualenv $VENV"
        "$PYTHON" -m venv "$VENV" || die "could not create a virtualenv (Debian/Ubuntu: apt-get install python3-venv)"
    fi
    say "installing the package into $VENV"
    if [ "$BUNDLE" = 1 ]; then install_from_bundle; else install_from_source; fi
    "$VENV/bin/npu-watchdog" --version >/dev/null || die "the installed npu-watchdog does not run"
    finish_install
}

finish_install() {
    install -m 0644 "$SOURCE/README.md" "$ROOT$PREFIX/README.md"

    # The config may hold webhook secrets: directory 0750, files 0600 (the daemon runs as root).
    mkdir -p "$ETC"
    chmod 0750 "$ETC"
    install -m 0600 "$SOURCE/config/npu-watchdog.example.yaml" "$ETC/config.yaml.example"
    if [ -e "$ETC/config.yaml" ]; then
        say "keeping the existing $ETC/config.yaml (the new example is config.yaml.example)"
        first_install=0
    else
        install -m 0600 "$SOURCE/config/npu-watchdog.example.yaml" "$ETC/config.yaml"
        say "installed $ETC/config.yaml from the example: edit it, then start the service"
        first_install=1
    fi

    mkdir -p "$ROOT$UNITDIR"
    tmp_unit=$UNIT.tmp.$$
    # Point ExecStart at this venv and config; everything else in the unit ships as written.
    sed -e "s|^ExecStart=.*|ExecStart=$VENV/bin/npu-watchdog run -c $ETC/config.yaml|" \
        -e "s|^Documentation=.*|Documentation=file://$ROOT$PREFIX/README.md|" \
        "$SOURCE/systemd/npu-watchdog.service" >"$tmp_unit"
    chmod 0644 "$tmp_unit"
    mv -f "$tmp_unit" "$UNIT"
    say "installed unit $UNIT"
    old_systemd_dropin

    # A channel URL still on the example's placeholder pages nobody, and the daemon refuses to
    # start on it: say which key to set, and enable nothing until it is set.
    placeholders=$("$VENV/bin/npu-watchdog" check-config -q -c "$ETC/config.yaml" 2>&1 | grep 'placeholder' || true)
    if [ -n "$placeholders" ]; then
        say "$ETC/config.yaml still holds a placeholder; the daemon will not start until it is set:"
        printf '%s\n' "$placeholders" | sed 's/^warning: /    /'
        say "next: set it in $ETC/config.yaml, check with \`$VENV/bin/npu-watchdog check-config -c $ETC/config.yaml\`, then: systemctl enable --now npu-watchdog"
    fi

    if systemd_live; then
        systemctl daemon-reload
        if [ -n "$placeholders" ]; then
            say "not enabled (see above)"
            return 0
        fi
        systemctl enable npu-watchdog.service
        if [ "$first_install" = 1 ]; then
            say "enabled; start it with: systemctl start npu-watchdog"
        else
            # An upgrade restarts a running daemon (and leaves a stopped one stopped).
            systemctl try-restart npu-watchdog.service
        fi
    else
        say "systemd is not running here (or --root was given): not calling systemctl"
    fi
}

# systemd before 239 has no @system-service group: the unit's system call filter would then allow
# almost nothing and the daemon could not start. There, a drop-in lifts the filter (the rest of the
# hardening stays); on a newer systemd an old drop-in is removed again.
old_systemd_dropin() {
    dropin=$UNIT.d/50-old-systemd.conf
    version=$(systemctl --version 2>/dev/null | awk 'NR == 1 {print $2}') || version=
    case "$version" in ''|*[!0-9]*) version= ;; esac
    if [ -z "$ROOT" ] && [ -n "$version" ] && [ "$version" -lt 239 ]; then
        mkdir -p "$UNIT.d"
        printf '# systemd %s has no @system-service group (install.sh)\n[Service]\nSystemCallFilter=\n' "$version" >"$dropin"
        chmod 0644 "$dropin"
        say "systemd $version: no system call filter (it needs 239); the rest of the hardening applies"
    elif [ -e "$dropin" ]; then
        rm -f "$dropin"
        rmdir "$UNIT.d" 2>/dev/null || true
    fi
}

do_uninstall() {
    if systemd_live; then
        systemctl disable --now npu-watchdog.service 2>/dev/null || true
    fi
    rm -f "$UNIT" "$UNIT.d/50-old-systemd.conf"
    rmdir "$UNIT.d" 2>/dev/null || true
    if systemd_live; then
        systemctl daemon-reload
    fi
    rm -rf "$VENV"
    rm -f "$ROOT$PREFIX/README.md" "$ETC/config.yaml.example"
    # Only empty directories go; the config (and the state under /var/lib) stays.
    rmdir "$ROOT$PREFIX" 2>/dev/null || true
    rmdir "$ETC" 2>/dev/null || true
    if [ -e "$ETC/config.yaml" ]; then
        say "removed; kept the config $ETC/config.yaml and the state directory"
    else
        say "removed"
    fi
}

"do_$action"
