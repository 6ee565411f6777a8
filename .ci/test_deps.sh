# Programs the tests drive that do not come with the toolchain, sourced by .ci/run.
#
# test_deps_install: Debian's chromium (browser tests), prometheus (its promtool
# checks the metrics and alert rules), valgrind (the runtime's model test) and
# faketime (libfaketime: tests/cluster_hidden_pause.rs hides a pause from every clock),
# installed only when missing; the Node.js packages of tests/browser and
# clients/typescript from their committed lockfiles; a Python virtual environment with tests/python/requirements.txt.
# test_deps_export then exports what the tests look for:
#   ROUTERD_TEST_PYTHON        the venv's python (has the `websockets` package)
#   ROUTERD_BROWSER_MODULES    tests/browser/node_modules (playwright-core)
#   ROUTERD_CHROMIUM           /usr/bin/chromium
# A test that needs one of these and does not find it fails when CI is set and
# skips with a message otherwise.

test_deps_apt() {
    local missing=()
    command -v chromium >/dev/null 2>&1 || missing+=(chromium)
    command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
    command -v valgrind >/dev/null 2>&1 || missing+=(valgrind)
    command -v faketime >/dev/null 2>&1 || missing+=(faketime)
    command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "== apt-get install ${missing[*]}"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

test_deps_install() {
    test_deps_apt
    echo "== npm ci (tests/browser)"
    (cd tests/browser && npm ci --no-audit --no-fund --loglevel=error)
    echo "== npm ci (clients/typescript: tsc and Node.js types, compiled by tests/clients.rs)"
    (cd clients/typescript && npm ci --no-audit --no-fund --loglevel=error)
    echo "== python venv (tests/python/requirements.txt)"
    python3 -m venv target/test-venv
    target/test-venv/bin/pip install -q --disable-pip-version-check -r tests/python/requirements.txt
}

# test_deps_export: what the tests look for, once test_deps_install is done
# (it may run in the background: its exports would not reach this shell).
test_deps_export() {
    local root
    root="$(pwd)"
    export ROUTERD_TEST_PYTHON="$root/target/test-venv/bin/python"
    export ROUTERD_BROWSER_MODULES="$root/tests/browser/node_modules"
    export ROUTERD_CHROMIUM=/usr/bin/chromium
}
