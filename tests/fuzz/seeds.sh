#!/usr/bin/env bash
# Seeds the office readers' fuzz targets from the test fixtures, into tests/fuzz/corpus (not
# committed): each fixture whole (an input starting with `PK` is read as a package), and its
# main parts joined by NUL bytes in the order the target replaces a new document's parts with.
set -euo pipefail
cd "$(dirname "$0")/../.."
fixtures=tests/fixtures
seed() { # target extension part...
    local target=$1 ext=$2
    shift 2
    mkdir -p "tests/fuzz/corpus/$target"
    find "$fixtures" -name "*.$ext" -print0 | while IFS= read -r -d '' file; do
        local name
        name=$(basename "$file" ".$ext")
        cp "$file" "tests/fuzz/corpus/$target/$name.$ext"
        local first=1
        for part in "$@"; do
            [ $first = 1 ] || printf '\0'
            first=0
            unzip -p "$file" "$part" 2>/dev/null || true
        done >"tests/fuzz/corpus/$target/$name.parts"
    done
}
seed xlsx_read xlsx xl/worksheets/sheet1.xml xl/sharedStrings.xml xl/styles.xml xl/workbook.xml \
    xl/_rels/workbook.xml.rels
seed docx_read docx word/document.xml word/styles.xml word/_rels/document.xml.rels \
    '[Content_Types].xml'
seed pptx_read pptx ppt/slides/slide1.xml ppt/presentation.xml ppt/_rels/presentation.xml.rels \
    ppt/slides/_rels/slide1.xml.rels ppt/slideLayouts/slideLayout1.xml ppt/theme/theme1.xml
ls tests/fuzz/corpus/{xlsx,docx,pptx}_read | wc -l
