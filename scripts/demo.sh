#!/usr/bin/env bash
# The main job end to end on the shipped example data: pack it into ZIP shards, then stream it
# back with datasets.load_dataset(..., streaming=True) and print what was read.
set -euo pipefail
export SHARDKIT_SKIP_DS36=1  # the demo reads with current datasets only
source "$(dirname "$0")/setup-venv.sh"
cd "$ROOT"
OUT="${1:-demo-output/yfcc-mini}"
EXAMPLE=example_datasets/yfcc-mini
echo "== pack-shards $EXAMPLE/images $EXAMPLE/metadata.jsonl -o $OUT"
pack-shards "$EXAMPLE/images" "$EXAMPLE/metadata.jsonl" -o "$OUT"
echo "== stream it back"
python scripts/stream_back.py "$OUT"
