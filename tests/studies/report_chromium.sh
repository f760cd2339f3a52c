#!/usr/bin/env bash
# report_chromium.sh KVF RESULTS_DIR: the report as a person sees it. `kvf report` (charts drawn when gnuplot is
# here) on a committed results directory, then headless Chromium at 1280 px: a screenshot must be written, the page
# must not be wider than the window (no horizontal overflow), and no chart may be missing ("chart ... not drawn").
# The check runs in a copy of report.html with a script appended that writes what it measured into the DOM, read
# back with --dump-dom (the screenshot taken by the same start). Exit 77 (ctest: skipped) with the reason when
# Chromium is not installed.
set -euo pipefail
kvf=$1 dir=$2
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then
  echo "skipped: Chromium not installed (Debian package chromium; scripts/test installs it as root)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$kvf" report "$dir" --out "$out/report" >/dev/null 2>&1 || { echo "kvf report failed on $dir"; exit 1; }
html="$out/report/report.html"
[ -s "$html" ] || { echo "no report.html"; exit 1; }
charts_wanted=$(grep -c '^!\[' "$out/report/report.md" || true)
check="$out/check.html"
sed 's#</body></html>#<script>(function(){var b=document.body;b.setAttribute("data-kvf-width",String(document.documentElement.scrollWidth));var n=0;document.querySelectorAll("p > i").forEach(function(e){if(/^chart .* not drawn$/.test(e.textContent))n++;});b.setAttribute("data-kvf-undrawn",String(n));b.setAttribute("data-kvf-figures",String(document.querySelectorAll("figure > svg").length));})();</script></body></html>#' \
  "$html" > "$check"
flags=(--headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update
       --no-first-run --hide-scrollbars --user-data-dir="$out/profile" --window-size=1280,1000)
# One start of Chromium for the DOM and the screenshot (each start is seconds of CI time); the appended script
# only sets attributes, so the screenshot is the report as a reader sees it.
dom=$(timeout 120 "$chrome" "${flags[@]}" --screenshot="$out/report.png" --dump-dom "file://$check" 2>/dev/null) ||
  { echo "chromium --dump-dom failed"; exit 1; }
width=$(grep -o 'data-kvf-width="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
undrawn=$(grep -o 'data-kvf-undrawn="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
figures=$(grep -o 'data-kvf-figures="[0-9]*"' <<<"$dom" | grep -o '[0-9]*' || true)
[ -n "$width" ] || { echo "the check script did not run (no data-kvf-width in the DOM)"; exit 1; }
fail=0
[ -s "$out/report.png" ] || { echo "no screenshot written"; fail=1; }
[ "$width" -le 1280 ] || { echo "horizontal overflow: the page is $width px wide in a 1280 px window"; fail=1; }
if command -v gnuplot >/dev/null; then
  [ "$undrawn" = 0 ] || { echo "$undrawn chart(s) not drawn"; fail=1; }
  [ "$figures" = "$charts_wanted" ] || { echo "$figures inlined charts for $charts_wanted in report.md"; fail=1; }
fi
[ $fail = 0 ] && echo "report.html of $dir: $width px wide at 1280, $figures charts inlined, screenshot written"
exit $fail
