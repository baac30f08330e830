//! The tool catalog: what the model may call, where it runs, and what it may touch.
//!
//! Names, parameters and descriptions follow the seed contracts (docs/tools.md); the names
//! themselves, and the pool each tool runs in, come from [`ToolName`].
//!
//! # Layout
//! - this file: the whole catalog, lookup by name, whether a workflow only reads, and each
//!   phase's subset.
//! - `tool_spec`: [`ToolSpec`] with its [`Capability`] and typical [`ActionClass`], and schema
//!   helpers.
//! - `classify`: the action class of one call, from its tool, arguments and the files.
//! - `office`, `tabular`: the tools of each pool.
//! - `local`: the tools the agent driver answers itself (`recall_tool_result`).

mod classify;
mod local;
mod office;
mod tabular;
mod tool_spec;

use std::sync::LazyLock;

use atelier_messages::path::{TableShape, kind_of_extension, table_shape};
use atelier_messages::tool::ToolName;

pub use atelier_messages::approval::ActionClass;
pub use classify::{Classified, classify};
pub use local::RECALL_MAX_CHARS;
pub use tool_spec::{Capability, ToolSpec};

/// The catalog, built once: its schemas are JSON values, and every workflow step and every
/// approval looks a tool up.
static CATALOG: LazyLock<Vec<ToolSpec>> = LazyLock::new(|| {
    let mut tools = office::tools();
    tools.extend(tabular::tools());
    tools.extend(local::tools());
    tools
});

/// Every tool, in a stable order.
pub fn catalog() -> Vec<ToolSpec> {
    CATALOG.clone()
}

/// Looks a tool up by name.
pub fn find(name: &str) -> Option<ToolSpec> {
    spec(name).cloned()
}

/// The catalog's entry for a tool.
fn spec(name: &str) -> Option<&'static ToolSpec> {
    let name = ToolName::parse(name)?;
    CATALOG.iter().find(|spec| spec.name == name)
}

/// Tools the Research phase may use (read-only, `recall_tool_result` among them).
/// True when every step of `workflow` calls a read-only tool: it changes no draft, so a draft
/// does not refuse it.
pub fn only_reads(workflow: &atelier_messages::workflow::Workflow) -> bool {
    workflow
        .steps
        .iter()
        .all(|step| spec(&step.tool).is_some_and(ToolSpec::is_read_only))
}

pub fn research_tools() -> Vec<ToolSpec> {
    CATALOG
        .iter()
        .filter(|spec| spec.is_read_only())
        .cloned()
        .collect()
}

/// Tools the Plan phase may use: `read_file` and `recall_tool_result`.
pub fn plan_tools() -> Vec<ToolSpec> {
    CATALOG
        .iter()
        .filter(|spec| matches!(spec.name, ToolName::ReadFile | ToolName::RecallToolResult))
        .cloned()
        .collect()
}

/// Tools the Implement phase may use (all of them).
pub fn implement_tools() -> Vec<ToolSpec> {
    catalog()
}

/// `tools` cut down for a compact prompt: only the tools for the file kinds in play (the
/// extensions, lower case, of the workbench's files, `present`, and of the files the request
/// names that it does not have, `named`), and
/// none whose work the prompt already does (the manifest lists the files, the structural
/// maps describe them) or that a small model rarely needs (styles, statistics). `read_file`
/// only when a present file is not a table: a small model reads a table's lines and counts
/// them wrong, where `table_query` counts.
pub fn for_file_kinds(tools: Vec<ToolSpec>, present: &[String], named: &[String]) -> Vec<ToolSpec> {
    let kinds = |extensions: &[String]| -> Vec<&'static str> {
        extensions
            .iter()
            .map(|extension| kind_of_extension(extension))
            .collect()
    };
    let present_kinds = kinds(present);
    let untabular = present_kinds.iter().any(|kind| !TABLE_KINDS.contains(kind));
    let in_play: Vec<&str> = present_kinds.into_iter().chain(kinds(named)).collect();
    let present = |wanted: &[&str]| in_play.iter().any(|kind| wanted.contains(kind));
    tools
        .into_iter()
        .filter(|spec| match spec.name {
            ToolName::ListFiles
            | ToolName::GetFileInfo
            | ToolName::GetFileMap
            | ToolName::TableGetMap
            | ToolName::TableDescribe
            | ToolName::TableStats
            | ToolName::XlsxGetStyles
            | ToolName::DocxGetStyles
            | ToolName::PptxGetStyles => false,
            ToolName::XlsxOperations => present(&["xlsx"]),
            ToolName::DocxOperations => present(&["docx"]),
            ToolName::PptxOperations => present(&["pptx"]),
            ToolName::TableReadRows
            | ToolName::TableQuery
            | ToolName::TableExport
            | ToolName::TableUpdateFromExport => present(TABLE_KINDS),
            ToolName::ReadFile => untabular,
            ToolName::WriteTextFile
            | ToolName::DeleteFile
            | ToolName::RenameFile
            | ToolName::RecallToolResult => true,
        })
        .collect()
}

/// The file kinds ([`kind_of_extension`]) whose rows the tabular tools read.
const TABLE_KINDS: &[&str] = &["csv", "xlsx"];

/// The paths among `paths` that the tabular tools read.
pub fn tables(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter(|path| is_table(path))
        .cloned()
        .collect()
}

/// The text files among `paths` whose figures a source query reads (`.txt`, `.md`).
pub fn texts(paths: &[String]) -> Vec<String> {
    paths
        .iter()
        .filter(|path| table_shape(path) == Some(TableShape::Prose))
        .cloned()
        .collect()
}

/// True when `path` is a file the tabular tools read as rows (by its extension).
pub fn is_table(path: &str) -> bool {
    matches!(
        table_shape(path),
        Some(TableShape::Delimited | TableShape::Workbook)
    )
}

/// True when `spec` can read `path`: the tabular tools read tables only, the other reading
/// tools any file.
pub fn reads(spec: &ToolSpec, path: &str) -> bool {
    match spec.name {
        ToolName::TableReadRows
        | ToolName::TableQuery
        | ToolName::TableGetMap
        | ToolName::TableDescribe
        | ToolName::TableStats => is_table(path),
        _ => true,
    }
}

/// True when `spec` creates or changes files of one of the kinds of `targets` (by their
/// extension): `write_text_file` text files, `table_export` csv and xlsx, the `*_operations`
/// and `table_update_from_export` their formats; deleting and moving tools only when
/// `removes` (the request asks to delete, remove, rename or move something).
pub fn writes_any(spec: &ToolSpec, targets: &[String], removes: bool) -> bool {
    let kinds: &[&str] = match spec.name {
        ToolName::DeleteFile | ToolName::RenameFile => return removes,
        ToolName::WriteTextFile => &[
            "txt", "md", "csv", "tsv", "json", "html", "htm", "xml", "yaml", "yml",
        ],
        ToolName::TableExport => &["csv", "xlsx"],
        ToolName::TableUpdateFromExport | ToolName::XlsxOperations => &["xlsx", "xlsm"],
        ToolName::DocxOperations => &["docx"],
        ToolName::PptxOperations => &["pptx"],
        _ => return true,
    };
    targets.iter().any(|target| {
        target
            .rsplit_once('.')
            .is_some_and(|(_, ext)| kinds.contains(&ext.to_lowercase().as_str()))
    })
}

#[cfg(test)]
mod tests {
    use atelier_messages::tool::Pool;

    #[test]
    fn a_tool_with_only_its_required_parameters_keeps_its_operations_whole() {
        let names = |spec: &ToolSpec| -> Vec<String> {
            spec.parameters["properties"]
                .as_object()
                .map(|properties| properties.keys().cloned().collect())
                .unwrap_or_default()
        };
        let read = find("read_file").map(|spec| spec.required_only());
        assert_eq!(read.as_ref().map(names), Some(vec!["path".to_string()]));
        let docx = find("docx_operations").map(|spec| spec.required_only());
        assert_eq!(
            docx.as_ref().map(names),
            Some(vec!["operations".to_string(), "path".to_string()])
        );
        let full =
            find("docx_operations").map(|spec| spec.parameters["properties"]["operations"].clone());
        assert_eq!(
            docx.map(|spec| spec.parameters["properties"]["operations"].clone()),
            full
        );
    }

    use super::*;

    #[test]
    fn the_catalog_lists_every_tool_once_each_pool_in_its_file() {
        let mut names: Vec<_> = catalog().iter().map(|spec| spec.name).collect();
        names.sort();
        assert_eq!(names, ToolName::ALL.to_vec());
        assert!(
            office::tools()
                .iter()
                .all(|spec| spec.pool() == Some(Pool::Office))
        );
        assert!(
            tabular::tools()
                .iter()
                .all(|spec| spec.pool() == Some(Pool::Tabular))
        );
        assert!(local::tools().iter().all(|spec| spec.name.is_local()));
        assert_eq!(
            find("table_query").map(|spec| spec.pool()),
            Some(Some(Pool::Tabular))
        );
        assert_eq!(find("rm_rf"), None);
    }

    #[test]
    fn research_tools_are_read_only_and_include_table_map() {
        let names: Vec<_> = research_tools()
            .iter()
            .map(|spec| spec.name.as_str())
            .collect();
        assert!(names.contains(&"table_get_map"));
        assert!(!names.contains(&"table_export"));
        assert!(!names.contains(&"write_text_file"));
    }

    #[test]
    fn every_phase_with_tools_may_recall_a_result() {
        for tools in [research_tools(), plan_tools(), implement_tools()] {
            assert!(
                tools
                    .iter()
                    .any(|spec| spec.name == ToolName::RecallToolResult)
            );
        }
        let plan: Vec<_> = plan_tools().iter().map(|spec| spec.name).collect();
        assert_eq!(plan, [ToolName::ReadFile, ToolName::RecallToolResult]);
        let recall = find("recall_tool_result").map(|spec| spec.description);
        assert!(recall.is_some_and(|text| text.contains(&RECALL_MAX_CHARS.to_string())));
    }

    #[test]
    fn a_compact_prompt_offers_the_tools_of_the_file_kinds_in_play() {
        let names = |extensions: &[&str]| -> Vec<&'static str> {
            let extensions: Vec<String> = extensions.iter().map(|ext| ext.to_string()).collect();
            for_file_kinds(implement_tools(), &extensions, &[])
                .iter()
                .map(|spec| spec.name.as_str())
                .collect()
        };
        let csv = names(&["csv", "txt"]);
        assert!(!names(&["csv"]).contains(&"read_file"));
        // A text file the request names but the workbench lacks needs no reading tool.
        let named = for_file_kinds(implement_tools(), &["csv".into()], &["txt".into()]);
        assert!(!named.iter().any(|spec| spec.name == ToolName::ReadFile));
        let named = for_file_kinds(implement_tools(), &["csv".into()], &["docx".into()]);
        assert!(
            named
                .iter()
                .any(|spec| spec.name == ToolName::DocxOperations)
        );
        assert_eq!(
            csv,
            [
                "read_file",
                "write_text_file",
                "delete_file",
                "rename_file",
                "table_read_rows",
                "table_query",
                "table_export",
                "table_update_from_export",
                "recall_tool_result"
            ]
        );
        let docx = names(&["docx"]);
        assert!(docx.contains(&"docx_operations"));
        assert!(!docx.contains(&"table_query") && !docx.contains(&"xlsx_operations"));
        assert!(names(&["xlsx"]).contains(&"xlsx_operations"));
        assert!(names(&["xlsx"]).contains(&"table_query"));
        // Research keeps only what reads.
        let research = for_file_kinds(research_tools(), &["csv".to_string()], &[]);
        assert!(research.iter().all(ToolSpec::is_read_only));
    }

    #[test]
    fn every_schema_is_an_object_with_known_required_fields() {
        for spec in catalog() {
            let properties = spec.parameters["properties"]
                .as_object()
                .cloned()
                .unwrap_or_default();
            for required in spec.parameters["required"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let key = required.as_str().unwrap_or_default();
                assert!(properties.contains_key(key), "{}: {key}", spec.name);
            }
        }
    }
}
