#!/usr/bin/env bash
# README's test command (`make test`) again, as a normal user (CI's second pass; run it as
# root).
#
# pysb is used by normal users from anywhere on disk, and what the kernel allows differs
# for them (no capabilities, user namespaces of their own, set-uid firejail). So this:
#   1. creates the user (PYSB_TEST_USER, default pysbci) unless it exists;
#   2. copies the checkout (tracked and untracked files, no .venv) into a directory that
#      user owns outside /tmp ($HOME/pysb), so nothing is read from root's directories;
#   3. runs `make test` there, as a new user would: it builds that user's own dev venv
#      from Debian's python3 (make dev) and runs scripts/test.sh, so PYSB_REQUIRE_PROVIDERS
#      makes an unavailable provider a failure, never a silent skip.
# Extra arguments are scripts/test.sh's instead (pytest arguments, or --full/--rest).
set -euo pipefail
cd "$(dirname "$0")/.."
user="${PYSB_TEST_USER:-pysbci}"
if [ "$(id -u)" -ne 0 ]; then
  echo "test-unprivileged.sh: run it as root (it creates the user $user and runs as it)" >&2
  exit 2
fi
if ! id -u "$user" >/dev/null 2>&1; then
  useradd --create-home --shell /bin/bash "$user"
fi
# As a user of qemu would be: in the kvm group (/dev/kvm is root:kvm 0660 on Debian), or
# the guest runs under TCG emulation, several times slower.
if getent group kvm >/dev/null; then
  usermod -a -G kvm "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"
dest="$home/pysb"
rm -rf "$dest"
mkdir -p "$dest"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git ls-files -z --cached --others --exclude-standard | tar --null -cf - -T - | tar -xf - -C "$dest"
else
  tar --exclude=./.venv -cf - . | tar -xf - -C "$dest"
fi
chown -R "$user:" "$dest"

# A pyenv build the user can read (root's ~/.pyenv is closed to it), for
# tests/test_interpreters.py: a copy of root's 3.12 under the user's ~/.pyenv, its RUNPATH
# (absolute: /root/.pyenv/versions/X/lib, where libpython lives) pointed at its own lib/.
pyenv_root="${PYENV_ROOT:-$(getent passwd root | cut -d: -f6)/.pyenv}"
for version in "$pyenv_root"/versions/3.12*; do
  [ -x "$version/bin/python3" ] || continue
  copy="$home/.pyenv/versions/$(basename "$version")"
  if [ ! -x "$copy/bin/python3" ] && command -v patchelf >/dev/null; then
    mkdir -p "$copy"
    tar -C "$version" --exclude=./lib/python3.12/test -cf - . | tar -C "$copy" -xf -
    for binary in "$copy"/bin/python3.12; do
      patchelf --set-rpath '$ORIGIN/../lib' "$binary"
    done
    chown -R "$user:" "$home/.pyenv"
  fi
  break
done

command=(make test)
if [ "$#" -gt 0 ]; then
  command=(bash -c 'make dev && ./scripts/test.sh "$@"' scripts/test.sh "$@")
fi
echo "== unprivileged pass: user $user (uid $(id -u "$user")), checkout $dest"
# A clean environment: the user's own HOME and PATH (Debian's python3, not root's pyenv).
exec runuser -u "$user" -- env -i HOME="$home" USER="$user" LOGNAME="$user" \
  PATH=/usr/local/bin:/usr/bin:/bin LANG=C.UTF-8 CI="${CI:-}" \
  PYSB_REQUIRE_PROVIDERS="${PYSB_REQUIRE_PROVIDERS-landlock,bwrap,unshare,firejail,qemu}" \
  bash -c 'cd "$1" && shift && exec "$@"' pysb-unprivileged "$dest" "${command[@]}"
