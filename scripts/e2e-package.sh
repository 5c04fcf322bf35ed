#!/usr/bin/env bash
# e2e-package.sh builds the packages with scripts/package and checks them as
# a user of the distribution would meet them: lintian on the .deb, then
# dpkg -i (with a policy-rc.d that lets nothing start), the installed
# binary, man pages, units, enabled socket and completions, then dpkg -P,
# which must leave none of the package's files; the .rpm must list the same
# files, its scriptlets must call what rpm-based systems expect (run with
# stubs), and the arm64 binary must be an ELF for aarch64.
#
# It installs a package, so it needs root. It refuses (not ok) to run where a
# localbus package or /usr/bin/localbus is already there, or localbus units
# or enable links in /etc/systemd/system (a build from source), and it moves
# /etc/localbus, /var/lib/localbus and /var/lib/private/localbus aside and
# back, so a running daemon's state is never touched.
#
# It prints one line per check, "ok - …" or "not ok - …" (then it stops);
# scripts/test counts them. Run by scripts/test without root, it prints one
# "skip - …" line saying it did not run.
set -eu
cd "$(dirname "$0")/.."
repo=$PWD
for d in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$d:"*) ;; *) PATH=$PATH:$d ;; esac
done

pass=0
ok() { pass=$((pass + 1)); echo "ok - package: $*"; }
fail() {
  echo "not ok - package: $*"
  exit 1
}

if [ "$(id -u)" != 0 ]; then
  if [ "${LOCALBUS_TEST_UNPRIVILEGED:-}" = 1 ]; then
    echo "skip - package: DID NOT RUN: installing the .deb needs root; run scripts/test as root (CI does)"
    exit 0
  fi
  fail "needs root: it installs and purges the .deb (run it as root, as CI does)"
fi
for tool in lintian:lintian rpm:rpm man:man-db dpkg-deb:dpkg deb-systemd-helper:init-system-helpers systemd-analyze:systemd; do
  command -v "${tool%%:*}" >/dev/null 2>&1 && continue
  if [ "${LOCALBUS_TEST_NO_INSTALL:-}" = 1 ]; then
    echo "skip - package: DID NOT RUN: ${tool%%:*} is not installed (Debian package ${tool#*:})"
    exit 0
  fi
  fail "${tool%%:*} is not installed (Debian package ${tool#*:}); scripts/test installs it"
done

# Never touch an installed localbus.
status=$(dpkg-query -W -f='${Status}' localbus 2>/dev/null || true)
case "$status" in
  "" | "unknown ok not-installed" | "deinstall ok not-installed") ;;
  *) fail "a localbus package is already on this machine ($status): remove it (dpkg -P localbus) to run this test" ;;
esac
[ -e /usr/bin/localbus ] && fail "/usr/bin/localbus already exists: move it away to run this test"
# Nor units installed from source (localbus systemd install) or an
# administrator's enable link: deb-systemd-helper prefers a unit in
# /etc/systemd/system to the package's, takes an existing enable link for
# the package's own, and the purge would then remove that link.
for u in localbus.socket localbus.service; do
  for p in /etc/systemd/system/$u /etc/systemd/system/*.wants/$u; do
    if [ -e "$p" ] || [ -L "$p" ]; then
      fail "$p already exists (units installed from source, or enabled by hand): the package's scripts would take it for their own and the purge could remove it; move it away (and systemctl daemon-reload) to run this test"
    fi
  done
done

tmp=$(mktemp -d)
aside=()    # paths moved aside, to put back
installed=0 # whether this test installed the package
policy=/usr/sbin/policy-rc.d
private_made=0 # whether this test made /var/lib/private
group_made=1   # whether the install made the group localbus
getent group localbus >/dev/null && group_made=0
cleanup() {
  if [ "$installed" = 1 ]; then
    dpkg -P localbus >/dev/null 2>&1 || true
  fi
  # Put back what was moved aside, over anything the test left there.
  for p in "${aside[@]}"; do
    rm -rf "$p"
    if [ -e "$p.e2e-aside" ] || [ -L "$p.e2e-aside" ]; then mv "$p.e2e-aside" "$p"; fi
  done
  # A purge keeps the group, as Debian does with system groups; the test
  # removes the one its install made.
  if [ "$group_made" = 1 ] && getent group localbus >/dev/null; then groupdel localbus || true; fi
  if [ "$private_made" = 1 ]; then rmdir /var/lib/private 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' HUP INT PIPE TERM # so cleanup runs on a signal too
for p in /etc/localbus /var/lib/localbus /var/lib/private/localbus "$policy"; do
  if [ -e "$p" ] || [ -L "$p" ]; then
    [ -e "$p.e2e-aside" ] && fail "$p.e2e-aside exists, left by an earlier run: put it back as $p first"
    mv "$p" "$p.e2e-aside"
    aside+=("$p")
  fi
done
# Nothing starts during the install, whatever the init system.
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod 755 "$policy"
[ -e "$policy.e2e-aside" ] || aside+=("$policy") # none to put back: removed at the end

start=$(date +%s)
# The version rule, in a repository of its own: the commit's date and short
# hash without a tag; a v-tag without its v; +dirty for a changed tracked
# file only.
v=$tmp/version-repo
mkdir -p "$v/scripts"
cp scripts/package "$v/scripts/package"
g() { git -C "$v" -c user.name=t -c user.email=t@localhost -c commit.gpgsign=false -c tag.gpgsign=false "$@"; }
g init -q
g add scripts/package
GIT_COMMITTER_DATE=2026-01-02T23:30:00Z GIT_AUTHOR_DATE=2026-01-02T23:30:00Z g commit -qm one
h=$(g rev-parse --short=12 HEAD)
vcheck() { # vcheck WANT WHAT
  got=$("$v/scripts/package" --version) || fail "scripts/package --version $2: exit $?"
  [ "$got" = "$1" ] || fail "scripts/package --version $2: $got, want $1"
}
vcheck "0.0.0~git20260102.$h" "without a tag"
g tag x9
vcheck "0.0.0~git20260102.$h" "with only a tag that is not v[0-9]*"
touch "$v/untracked"
vcheck "0.0.0~git20260102.$h" "with an untracked file"
echo >>"$v/scripts/package"
vcheck "0.0.0~git20260102.$h+dirty" "with a changed tracked file"
g checkout -q scripts/package
g tag v1.2.3
vcheck 1.2.3 "at tag v1.2.3"
g commit -q --allow-empty -m two
vcheck "1.2.3-1-g$(g rev-parse --short HEAD)" "one commit after v1.2.3"
ok "the version rule: 0.0.0~git<YYYYMMDD>.<hash> without a tag, the v-tag without its v, +dirty for changed tracked files"

# Build.
DIST=$tmp/dist scripts/package >"$tmp/packages" 2>"$tmp/package.err" || fail "scripts/package: $(cat "$tmp/package.err")"
version=$(scripts/package --version)
want=""
for arch in amd64 arm64; do
  for p in deb rpm; do want+="$tmp/dist/localbus_${version}_$arch.$p"$'\n'; done
done
[ "$(cat "$tmp/packages")"$'\n' = "$want" ] || fail "scripts/package made $(cat "$tmp/packages"), want $want"
for f in $want; do [ -s "$f" ] || fail "$f is missing or empty"; done
ok "scripts/package builds localbus_${version}_{amd64,arm64}.{deb,rpm} ($(du -k $want | awk '{printf "%s%dK", s, $1; s=" "}'))"
deb=$tmp/dist/localbus_${version}_$(dpkg --print-architecture).deb
[ -e "$deb" ] || fail "no .deb for this machine's architecture $(dpkg --print-architecture)"
arm_deb=$tmp/dist/localbus_${version}_arm64.deb

# Lintian: no error, and no override (the package ships none, so no tag is
# silenced; the one warning it reports, shared-library-lacks-prerequisites,
# is a PIE binary with an interpreter and no DT_NEEDED, as every Go PIE built
# without cgo is).
dpkg-deb -c "$deb" | grep -q 'usr/share/lintian/overrides' && fail "the .deb ships a lintian override"
for d in "$deb" "$arm_deb"; do
  lintian --no-cfg --fail-on error "$d" >"$tmp/lintian.out" 2>&1 || fail "lintian $(basename "$d"): $(cat "$tmp/lintian.out")"
  grep -q '^E: ' "$tmp/lintian.out" && fail "lintian $(basename "$d") reports errors: $(cat "$tmp/lintian.out")"
done
ok "lintian reports no error on either .deb, with no override"

# The arm64 binary: a 64-bit little-endian ELF, position independent
# (ET_DYN), for aarch64 (EM_AARCH64 = 183).
dpkg-deb --fsys-tarfile "$arm_deb" | tar -xO ./usr/bin/localbus >"$tmp/arm64-localbus"
hdr=$(od -An -tu1 -N20 "$tmp/arm64-localbus" | tr -s ' \n' ' ')
case "$hdr" in
  " 127 69 76 70 2 1 "*" 3 0 183 0 ") ;;
  *) fail "arm64 /usr/bin/localbus is not a PIE ELF for aarch64: header bytes$hdr" ;;
esac
[ "$(rpm -qp --qf '%{ARCH}' "$tmp/dist/localbus_${version}_arm64.rpm" 2>/dev/null)" = aarch64 ] || fail "the arm64 .rpm is not for aarch64"
ok "the arm64 binary is a PIE ELF for aarch64, and its .rpm is for aarch64"

# Install, with the state that a purge removes in place.
dpkg -i "$deb" >"$tmp/dpkg.out" 2>&1 || { installed=1; fail "dpkg -i: $(cat "$tmp/dpkg.out")"; }
installed=1
ok "dpkg -i installs it (policy-rc.d exiting 101)"

got=$(/usr/bin/localbus version)
[[ "$got" =~ ^localbus\ ${version//+/\\+}\ \(commit\ $(git rev-parse --short=12 HEAD),\ go[0-9.]+\)$ ]] ||
  fail "localbus version: $got, want localbus $version (commit $(git rev-parse --short=12 HEAD), goX.Y.Z)"
[ "$(/usr/bin/localbus --version)" = "$got" ] || fail "localbus --version differs from localbus version"
ok "localbus version shows the stamped version: $got"

for page in localbus localbus-events localbus-serve localbus-config; do
  p=$(man -w "$page" 2>&1) || fail "man -w $page: $p"
  [ "$p" = "/usr/share/man/man1/$page.1.gz" ] || fail "man -w $page: $p"
  man "$page" 2>&1 >/dev/null | grep . && fail "man $page reports errors"
done
ok "man -w finds localbus and localbus-events (and their pages render without errors)"

getent group localbus >/dev/null || fail "the group localbus was not created"
units=(/usr/lib/systemd/system/localbus.socket /usr/lib/systemd/system/localbus.service)
mkdir -p "$tmp/run" "$tmp/home"
out=$(SYSTEMD_LOG_LEVEL=notice SYSTEMD_PAGER= systemd-analyze verify --man=no "${units[@]}" 2>&1) || fail "systemd-analyze verify: $out"
[ -z "$out" ] || fail "systemd-analyze verify warns: $out"
out=$(XDG_RUNTIME_DIR=$tmp/run HOME=$tmp/home SYSTEMD_LOG_LEVEL=notice SYSTEMD_PAGER= systemd-analyze verify --man=no --user \
  /usr/lib/systemd/user/localbus.socket /usr/lib/systemd/user/localbus.service 2>&1) || fail "systemd-analyze verify --user: $out"
[ -z "$out" ] || fail "systemd-analyze verify --user warns: $out"
grep -qx 'SocketGroup=localbus' /usr/lib/systemd/system/localbus.socket || fail "the system socket has no SocketGroup=localbus"
grep -qx 'ExecStart=/usr/bin/localbus serve' /usr/lib/systemd/system/localbus.service || fail "the system service does not run /usr/bin/localbus"
grep -qx 'ExecStart=/usr/bin/localbus serve' /usr/lib/systemd/user/localbus.service || fail "the user service does not run /usr/bin/localbus"
{ printf '# --- localbus.socket ---\n'; cat "${units[0]}"; printf '\n# --- localbus.service ---\n'; cat "${units[1]}"; } >"$tmp/units.want"
/usr/bin/localbus systemd print >"$tmp/units.got" 2>"$tmp/units.err" || fail "localbus systemd print: $(cat "$tmp/units.err")"
cmp -s "$tmp/units.want" "$tmp/units.got" || fail "the installed localbus systemd print differs from the installed units: $(diff "$tmp/units.want" "$tmp/units.got")"
[ -s "$tmp/units.err" ] && fail "localbus systemd print warns: $(cat "$tmp/units.err")"
ok "the installed units pass systemd-analyze verify (system and user), run /usr/bin/localbus with SocketGroup=localbus, as localbus systemd print shows"

link=/etc/systemd/system/sockets.target.wants/localbus.socket
# deb-systemd-helper may name the unit through /lib, which a merged /usr
# makes the same file.
[ -L "$link" ] && [ "$(readlink -f "$link")" = "$(readlink -f /usr/lib/systemd/system/localbus.socket)" ] ||
  fail "localbus.socket is not enabled: $link -> $(readlink "$link" || echo nothing)"
ok "localbus.socket is enabled ($link)"

bashdir=/usr/share/bash-completion/completions
if command -v pkg-config >/dev/null 2>&1 && pkg-config --exists bash-completion 2>/dev/null; then
  bashdir=$(pkg-config --variable=completionsdir bash-completion)
fi
[ -f "$bashdir/localbus" ] || fail "no bash completion in $bashdir"
got=$(bash -c 'source "$1/localbus"; COMP_WORDS=(localbus ev); COMP_CWORD=1; _localbus; echo "${COMPREPLY[*]}"' _ "$bashdir")
[ "$got" = events ] || fail "bash completion of 'localbus ev' gives '$got', want events"
[ -f /usr/share/fish/vendor_completions.d/localbus.fish ] || fail "no fish completion in /usr/share/fish/vendor_completions.d"
grep -q "complete -c localbus" /usr/share/fish/vendor_completions.d/localbus.fish || fail "the fish completion completes no localbus"
if command -v fish >/dev/null 2>&1; then
  fish -c 'complete -C "localbus ev"' | grep -q '^events' || fail "fish does not complete 'localbus ev'"
fi
[ -f /usr/share/zsh/vendor-completions/_localbus ] || fail "no zsh completion in /usr/share/zsh/vendor-completions"
ok "completions are where bash ($bashdir, and it completes) and fish (vendor_completions.d) look, and zsh's"

dpkg-query -W -f='${Conffiles}' localbus | grep -q '^ /etc/localbus/config.toml ' || fail "/etc/localbus/config.toml is not a conffile"
/usr/bin/localbus config defaults --set keys_file=/var/lib/localbus/keys.json | cmp -s - /etc/localbus/config.toml ||
  fail "/etc/localbus/config.toml is not localbus config defaults with keys_file in the state dir"
for f in README.md changelog.gz copyright; do [ -f "/usr/share/doc/localbus/$f" ] || fail "no /usr/share/doc/localbus/$f"; done
zcat /usr/share/doc/localbus/changelog.gz | head -1 | grep -qF "localbus ($version)" || fail "changelog.gz does not open with this version"
grep -q '^License: Apache-2.0$' /usr/share/doc/localbus/copyright || fail "copyright names no Apache-2.0"
ok "/etc/localbus/config.toml is a conffile, localbus config defaults with keys_file set; README, changelog.gz, copyright in /usr/share/doc/localbus"

# The files of the package, and the state a purge must remove, as the
# service and the administrator would leave it.
dpkg -L localbus >"$tmp/listed"
files=()
while IFS= read -r f; do
  [ -d "$f" ] && [ ! -L "$f" ] && continue
  files+=("$f")
done <"$tmp/listed"
[ "${#files[@]}" -ge 20 ] || fail "dpkg -L lists only ${#files[@]} files"
[ -d /var/lib/private ] || private_made=1
mkdir -p /var/lib/private/localbus/journal
echo state >/var/lib/private/localbus/journal/log
ln -s private/localbus /var/lib/localbus
echo '{}' >/etc/localbus/keys.json
dpkg -P localbus >"$tmp/dpkg.out" 2>&1 || fail "dpkg -P: $(cat "$tmp/dpkg.out")"
installed=0
left=()
for f in "${files[@]}" /etc/localbus /var/lib/localbus /var/lib/private/localbus "$link"; do
  if [ -e "$f" ] || [ -L "$f" ]; then left+=("$f"); fi
done
[ "${#left[@]}" = 0 ] || fail "dpkg -P left ${left[*]}"
ok "dpkg -P leaves none of the ${#files[@]} files dpkg -L listed, nor /etc/localbus, /var/lib/localbus, /var/lib/private/localbus or the enable link"

# The .rpm: the same files, but for the Debian changelog.
printf '%s\n' "${files[@]}" | grep -vx /usr/share/doc/localbus/changelog.gz | sort >"$tmp/deb.files"
for arch in amd64 arm64; do
  rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$tmp/dist/localbus_${version}_$arch.rpm" 2>/dev/null |
    awk '$1 !~ /^d/ {print $2}' | sort >"$tmp/rpm.files"
  cmp -s "$tmp/deb.files" "$tmp/rpm.files" || fail "rpm -qpl $arch differs from the .deb's files: $(diff "$tmp/deb.files" "$tmp/rpm.files")"
done
ok "rpm -qpl on both .rpm lists the .deb's $(wc -l <"$tmp/deb.files") files but the Debian changelog"

# The .rpm's scriptlets, as rpm would run them (sh, $1 the count rpm
# passes), with stubs for the programs they call that write down what they
# were asked, and a directory of the test's own for /run/systemd/system (no
# rpm-based system here to install it on).
rpm_script() { # $1: POSTIN, PREUN or POSTUN
  rpm -qp --qf "%{$1}" "$tmp/dist/localbus_${version}_amd64.rpm" 2>/dev/null
}
stubs=$tmp/stubs
mkdir -p "$stubs"
for prog in systemctl systemd-sysusers groupadd getent; do
  printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n%s\n' "$prog" "$tmp" "$([ "$prog" = getent ] && echo 'exit 2' || echo 'exit 0')" >"$stubs/$prog"
  chmod +x "$stubs/$prog"
done
# run_scriptlet TAG ARG SYSTEMD [PROG...]: the calls the scriptlet makes
# with only PROGs (default all) in PATH, and /run/systemd/system present
# when SYSTEMD is 1.
run_scriptlet() {
  local tag=$1 arg=$2 systemd=$3 bin=$tmp/bin.$RANDOM
  shift 3
  mkdir -p "$bin"
  for prog in "${@:-systemctl systemd-sysusers groupadd getent}"; do
    for q in $prog; do ln -sf "$stubs/$q" "$bin/$q"; done
  done
  local sysdir=$tmp/run-systemd-system
  rm -rf "$sysdir"
  [ "$systemd" = 1 ] && mkdir -p "$sysdir"
  : >"$tmp/calls"
  rpm_script "$tag" | sed "s#/run/systemd/system#$sysdir#g" >"$tmp/scriptlet"
  PATH=$bin /bin/sh -e "$tmp/scriptlet" "$arg" || fail "the .rpm's $tag scriptlet exits $? with \$1=$arg"
  tr '\n' ';' <"$tmp/calls"
}
expect_calls() { # what, got, want
  [ "$2" = "$3" ] || fail "the .rpm's $1 calls '$2', want '$3'"
}
for tag in POSTIN PREUN POSTUN; do
  [ -n "$(rpm_script $tag)" ] || fail "the .rpm has no $tag scriptlet"
done
expect_calls "%post on install" "$(run_scriptlet POSTIN 1 1)" "systemd-sysusers localbus.conf;systemctl daemon-reload;systemctl preset localbus.socket;"
expect_calls "%post on upgrade" "$(run_scriptlet POSTIN 2 1)" "systemd-sysusers localbus.conf;systemctl daemon-reload;"
expect_calls "%post without systemd running" "$(run_scriptlet POSTIN 1 0)" "systemd-sysusers localbus.conf;"
expect_calls "%post without systemd-sysusers" "$(run_scriptlet POSTIN 1 0 getent groupadd)" "getent group localbus;groupadd -r localbus;"
expect_calls "%preun on erase" "$(run_scriptlet PREUN 0 1)" "systemctl --no-reload disable --now localbus.socket localbus.service;"
expect_calls "%preun on upgrade" "$(run_scriptlet PREUN 1 1)" ""
expect_calls "%postun on erase" "$(run_scriptlet POSTUN 0 1)" "systemctl daemon-reload;"
expect_calls "%postun on upgrade" "$(run_scriptlet POSTUN 1 1)" "systemctl daemon-reload;systemctl try-restart localbus.service;"
ok "the .rpm's %post, %preun and %postun, run with stubs: sysusers (or groupadd), daemon-reload, preset on install, disable --now on erase, try-restart on upgrade"

echo "# e2e-package: $pass ok in $(($(date +%s) - start))s"
