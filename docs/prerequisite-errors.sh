#!/usr/bin/env bash
# Prints what `routerd serve` says when each prerequisite of README.md's
# "Prerequisites" section is missing, so the messages quoted there can be
# re-recorded whenever the runtime under the cores changes.
#
#   cargo build -p routerd && docs/prerequisite-errors.sh [path/to/routerd]
#
# Needs gcc and the kernel's seccomp (for io_uring blocked by a container
# profile) and util-linux `setpriv` (to drop CAP_IPC_LOCK, which root has and
# which exempts a process from the locked-memory limit). x86_64 only: the
# seccomp filter names io_uring's syscalls by their x86_64 numbers.
set -u

routerd=${1:-target/debug/routerd}
[ -x "$routerd" ] || { echo "no routerd binary at $routerd (cargo build -p routerd)" >&2; exit 2; }
routerd=$(cd "$(dirname "$routerd")" && pwd)/$(basename "$routerd")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

config() { # cores recv_buffers
    cat > "$work/node.toml" <<EOF
[cores]
count = $1
recv_buffers = $2
[gateway]
listen = "127.0.0.1:0"
[admin]
listen = "127.0.0.1:0"
[store]
backend = "memory"
EOF
}

# Runs a command for at most 3 s and shows its exit status and stderr;
# "serving" with status 124 means it started (and was stopped by timeout).
show() {
    echo "\$ $*"
    RUST_BACKTRACE=0 timeout 3 "$@" 2>&1 | sed 's/^/    /'
    echo "    (exit status ${PIPESTATUS[0]})"
    echo
}

# Runs a command with io_uring_setup, io_uring_enter and io_uring_register
# failing with the given errno, as a seccomp profile that blocks them does
# (Docker's default answers EPERM, 1); ENOSYS (38) is what a kernel without
# io_uring answers.
cat > "$work/no_uring.c" <<'EOF'
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <unistd.h>
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    unsigned err = (unsigned)atoi(argv[1]);
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, 425, 0, 2),   /* io_uring_setup */
        BPF_JUMP(BPF_JMP | BPF_JGT | BPF_K, 427, 1, 0),   /* io_uring_register */
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (err & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog)) {
        perror("seccomp");
        return 1;
    }
    execvp(argv[2], argv + 2);
    perror("exec");
    return 1;
}
EOF
gcc -O2 -o "$work/no_uring" "$work/no_uring.c" || exit 1

cd "$work" || exit 1
echo "== io_uring blocked by seccomp (EPERM, as Docker's default profile)"
config 1 512
show ./no_uring 1 "$routerd" serve --config node.toml

echo "== no io_uring in the kernel (ENOSYS)"
show ./no_uring 38 "$routerd" serve --config node.toml

echo "== a tiny locked-memory limit, no CAP_IPC_LOCK (2 cores, 4096 receive buffers each)"
config 2 4096
show bash -c "ulimit -l 16 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \"$routerd\" serve --config node.toml"

echo "== no locked memory at all, no CAP_IPC_LOCK"
show bash -c "ulimit -l 0 && exec setpriv --inh-caps=-ipc_lock --bounding-set=-ipc_lock \"$routerd\" serve --config node.toml"

echo "== an open-file limit that leaves client sessions too few descriptors (2 cores)"
config 2 512
show bash -c "ulimit -n 512 && exec \"$routerd\" serve --config node.toml"

echo "== an old kernel's refusal of the ring flags (EINVAL from io_uring_setup)"
show ./no_uring 22 "$routerd" serve --config node.toml
