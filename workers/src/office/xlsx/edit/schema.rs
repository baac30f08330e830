//! Where new elements go: the schema order of `worksheet` and `workbook` children, and the
//! namespace prefix a part already uses (`x:` or none), so added elements match it.

use crate::office::xml::Element;

/// Schema order of `worksheet` children.
pub(super) const WORKSHEET_ORDER: &[&str] = &[
    "sheetPr",
    "dimension",
    "sheetViews",
    "sheetFormatPr",
    "cols",
    "sheetData",
    "sheetCalcPr",
    "sheetProtection",
    "protectedRanges",
    "scenarios",
    "autoFilter",
    "sortState",
    "dataConsolidate",
    "customSheetViews",
    "mergeCells",
    "phoneticPr",
    "conditionalFormatting",
    "dataValidations",
    "hyperlinks",
    "printOptions",
    "pageMargins",
    "pageSetup",
    "headerFooter",
    "rowBreaks",
    "colBreaks",
    "customProperties",
    "cellWatches",
    "ignoredErrors",
    "smartTags",
    "drawing",
    "legacyDrawing",
    "legacyDrawingHF",
    "picture",
    "oleObjects",
    "controls",
    "webPublishItems",
    "tableParts",
    "extLst",
];

/// Schema order of `workbook` children.
pub(super) const WORKBOOK_ORDER: &[&str] = &[
    "fileVersion",
    "fileSharing",
    "workbookPr",
    "workbookProtection",
    "bookViews",
    "sheets",
    "functionGroups",
    "externalReferences",
    "definedNames",
    "calcPr",
    "oleSize",
    "customWorkbookViews",
    "pivotCaches",
    "smartTagPr",
    "smartTagTypes",
    "webPublishing",
    "fileRecoveryPr",
    "webPublishObjects",
    "extLst",
];

/// The namespace prefix of an element name, with its colon (`x:` for `x:worksheet`).
pub(super) fn prefix_of(name: &str) -> String {
    name.rsplit_once(':')
        .map(|(p, _)| format!("{p}:"))
        .unwrap_or_default()
}

/// The child `local` of `root` (in `root`'s prefix), created at its place in `order` if missing.
pub(super) fn ensure_child<'a>(
    root: &'a mut Element,
    local: &str,
    order: &[&str],
) -> &'a mut Element {
    let prefix = prefix_of(&root.name);
    let order: Vec<String> = order.iter().map(|l| format!("{prefix}{l}")).collect();
    let order: Vec<&str> = order.iter().map(String::as_str).collect();
    root.ensure_child(&format!("{prefix}{local}"), &order)
}
