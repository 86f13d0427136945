#!/usr/bin/env bash
# The main job end to end on the shipped example data:
#   1. scaffold a dataset repo with the template (shardkit new),
#   2. pack the example images and metadata into it (pack-shards),
#   3. verify it (every shard, member and CRC against the manifest; --deep decodes every image),
#   4. push it to a Hub (every shard is checked against the manifest first),
#   5. stream it back from that Hub with datasets.load_dataset(..., streaming=True), print rows,
#      then once more with shardkit.stream (one request per shard).
# The Hub here is the Hub-API server the tests use, on 127.0.0.1: the real one needs a token and
# the network. To push to the real Hub: `hf auth login`, then `shardkit push OUT --repo you/name`.
set -euo pipefail
export SHARDKIT_SKIP_OLD_DATASETS=1  # the demo reads with current datasets only
# Its own venv, .venv-demo/, with shardkit alone: everything below (and tests/hub_server.py, which
# needs only pyyaml) runs on shardkit's own dependencies, none of the test tools (torch, dask, moto).
SETUP_VENV_NAME=.venv-demo SETUP_EXTRAS=""
source "$(dirname "$0")/setup-venv.sh"
cd "$ROOT"
DEMO="${SHARDKIT_DEMO_DIR:-demo-output}"  # where the demo writes (the tests point it elsewhere)
REPO_DIR="$DEMO/yfcc-mini"
EXAMPLE=example_datasets/yfcc-mini
mkdir -p "$DEMO"

if [ ! -d "$REPO_DIR" ]; then
  echo "== shardkit new --no-input dataset_name=yfcc-mini namespace=demo license=cc-by-4.0 -o $DEMO"
  shardkit new --no-input dataset_name=yfcc-mini namespace=demo license=cc-by-4.0 -o "$DEMO"
fi

# The example is 1.6 MB, one shard at the default target (half of 1 GB): a 100 KB target cuts it
# into shards as a real dataset's hundreds of GB are cut at the default.
echo "== pack-shards $EXAMPLE/images $EXAMPLE/metadata.jsonl -o $REPO_DIR --target-shard-size 100KB"
pack-shards "$EXAMPLE/images" "$EXAMPLE/metadata.jsonl" -o "$REPO_DIR" --target-shard-size 100KB

echo "== shardkit verify $REPO_DIR --deep"
shardkit verify "$REPO_DIR" --deep -q

echo "== start a Hub-API server on 127.0.0.1 (state in $DEMO/hub)"
rm -f "$DEMO/hub.url"  # a run before left its server's address: wait for this one's
python -u -m tests.hub_server --root "$DEMO/hub" --user demo > "$DEMO/hub.url" &
HUB_PID=$!
trap 'kill $HUB_PID 2>/dev/null || true' EXIT
for _ in $(seq 50); do [ -s "$DEMO/hub.url" ] && break; sleep 0.1; done
# Everything huggingface_hub and datasets do below goes to that server; nothing touches ~/.cache.
export HF_ENDPOINT="$(cat "$DEMO/hub.url")" HF_HOME="$(cd "$DEMO" && pwd)/hf-home" HF_HUB_DISABLE_XET=1
echo "   $HF_ENDPOINT"

echo "== shardkit push $REPO_DIR --repo demo/yfcc-mini"
HF_TOKEN="$(python -c 'from tests.hub_server import WRITE_TOKEN; print(WRITE_TOKEN)')" \
  shardkit push "$REPO_DIR" --repo demo/yfcc-mini

echo "== stream it back: load_dataset(\"demo/yfcc-mini\", streaming=True), then shardkit.stream(\"demo/yfcc-mini\")"
python scripts/stream_back.py demo/yfcc-mini "$REPO_DIR/shards.json"
