# Sourced by the learning scripts: the Selector to use when SELECTOR_MODEL is not set — the trained one that
# scripts/selector_learning.sh wrote (its default OUT: the recipe that beats the base, docs/selector.md (e); then
# the older OUT=outputs/selector_full run), else the embedded SmolLM2. Prints the choice, so a log says which
# Selector scored or rewarded.
default_selector_model() {
  local d
  for d in outputs/selector_learning/checkpoints/final outputs/selector_full/checkpoints/final; do
    if [ -f "$d/config.json" ]; then echo "$d"; return; fi
  done
  echo embedded:smollm2
}
SELECTOR_MODEL=${SELECTOR_MODEL:-$(default_selector_model)}
echo "[$(basename "$0")] Selector: $SELECTOR_MODEL" >&2
