#!/bin/sh
# mentions.sh: a context provider for faultline (docs/providers.md)
set -eu
out="$FAULTLINE_OUTPUT/mentions.md"
echo "# Where the symptom's code words appear" > "$out"
# The backquotes are the symptom's own, matched literally.
# shellcheck disable=SC2016
grep -o '`[A-Za-z_:]*`' "$FAULTLINE_SYMPTOM" | tr -d '`' | sort -u | head -n 8 |
while read -r word; do
    echo "## $word" >> "$out"
    grep -rn --include='*.rs' -w -- "${word##*::}" "$FAULTLINE_WORKSPACE/src" | head -n 5 |
        sed "s|^$FAULTLINE_WORKSPACE/||; s|^|    |" >> "$out" || true
done
