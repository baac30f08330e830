//! The house keeps its shape: three structural rules over the `src/` tree of every workspace
//! member (the members are read from the workspace `Cargo.toml`).
//!
//! **No long files.** A source file may hold at most [`MAX_LINES`] lines of non-test code: every
//! line counts except the lines of `#[cfg(test)]` items (in practice the trailing `mod tests`).
//! Test code is exempt: files named `tests.rs`, files with a `tests` directory in their
//! workspace path (the `src/**/tests/` modules and the `atelier-tests` harness crate), and files
//! declared `#[cfg(test)] mod x;` (following `#[path]`), together with their submodules.
//!
//! **No long functions.** A non-test function may span at most [`MAX_FUNCTION_LINES`] lines,
//! from its `fn` line to its closing brace (a nested function counts toward its parent too).
//!
//! **No import circles.** Within a crate every file of a normal (non-test) build is a module
//! named by its path: `coordinator/src/jobs.rs` is `crate::jobs`, `ops/src/dashboard/mod.rs` is
//! `crate::dashboard`. Module A depends on module B when A's non-test code names a path that
//! reaches into B: `crate::b::…`, `super::…` or `self::…` resolving into B, or a child module by
//! its bare name, in a `use` or anywhere in the code. A path to an item is a dependency on the
//! file module that holds or re-exports it (`crate::dashboard::api::X` depends on
//! `dashboard::api`). Comments, doc links and strings do not count.
//!
//! The parent↔child rule: a module naming one of its own ancestors (`super::X` in a child,
//! `crate::X` anywhere) is *not* a dependency. A parent declares its children, and a child using
//! its parent's items is ordinary Rust layout; counting it would make every `mod.rs` that
//! re-exports a child part of a circle. Every other dependency counts, parent→child included, so
//! a module that names an ancestor's other descendants (siblings, cousins) still closes a circle.
//! What the rule cannot see is a circle through a parent's own items (child → parent → other →
//! child): keep what children share in a module of its own rather than in their parent.
//!
//! Each strongly connected component of more than one module is reported with its files and the
//! paths that tie them together.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The most lines of non-test code one source file may hold.
const MAX_LINES: usize = 600;
/// The most lines one non-test function may span, from its `fn` line to its closing brace.
const MAX_FUNCTION_LINES: usize = 100;

/// A module path inside its crate, without the leading `crate` (`["dashboard", "api"]`).
type ModulePath = Vec<String>;

/// One `.rs` file of a crate's `src/` tree.
struct SourceFile {
    /// The path relative to the workspace root, with `/` separators.
    path: String,
    /// The path relative to the crate's `src/`.
    under_src: PathBuf,
    /// The module the file's path names.
    module: ModulePath,
    /// The text as written.
    text: String,
    /// The text with comments and literal contents blanked (see [`blank_comments_and_literals`]).
    code: String,
    /// Whether the file is compiled only into test builds (`#[cfg(test)] mod x;`).
    test_only: bool,
}

impl SourceFile {
    /// Whether the size rule exempts the file as test code.
    fn is_test_code(&self) -> bool {
        self.test_only
            || self.path.split('/').any(|part| part == "tests")
            || self.path.ends_with("/tests.rs")
    }

    /// The file's code outside `#[cfg(test)]` items, line by line.
    fn non_test_lines(&self) -> Vec<&str> {
        let lines: Vec<&str> = self.code.lines().collect();
        let in_test = test_item_lines(&lines);
        lines
            .into_iter()
            .zip(in_test)
            .filter(|(_, test)| !test)
            .map(|(line, _)| line)
            .collect()
    }
}

/// The source files of one workspace member.
struct Crate {
    /// The member's directory as the workspace lists it (`messages/transport`).
    member: String,
    files: Vec<SourceFile>,
}

#[test]
fn no_source_file_is_over_the_line_limit() -> anyhow::Result<()> {
    let mut offenders = Vec::new();
    for krate in workspace_crates()? {
        for file in krate.files.iter().filter(|file| !file.is_test_code()) {
            let lines = file.non_test_lines().len();
            if lines > MAX_LINES {
                offenders.push(format!("{}: {lines} lines of non-test code", file.path));
            }
        }
    }
    if !offenders.is_empty() {
        bail!(
            "source files over {MAX_LINES} lines of non-test code; split them along their concerns:\n  {}",
            offenders.join("\n  ")
        );
    }
    Ok(())
}

#[test]
fn no_function_is_over_the_line_limit() -> anyhow::Result<()> {
    let mut offenders = Vec::new();
    for krate in workspace_crates()? {
        for file in krate.files.iter().filter(|file| !file.is_test_code()) {
            for (name, lines) in long_functions(&file.non_test_lines()) {
                offenders.push(format!("{}: fn {name} spans {lines} lines", file.path));
            }
        }
    }
    if !offenders.is_empty() {
        bail!(
            "functions over {MAX_FUNCTION_LINES} lines of non-test code; split them into steps \
             with names:\n  {}",
            offenders.join("\n  ")
        );
    }
    Ok(())
}

#[test]
fn function_lengths_are_measured_from_fn_to_its_closing_brace() {
    let long_body = "    let x = 1;\n".repeat(MAX_FUNCTION_LINES);
    let code = format!(
        "fn short() {{\n}}\ntrait T {{\n    fn declared(&self);\n}}\n\
         pub(crate) async fn long_one(f: fn(u8) -> u8, key: [u8; 4]) {{\n{long_body}}}\n"
    );
    let lines: Vec<&str> = code.lines().collect();
    assert_eq!(
        long_functions(&lines),
        [("long_one".to_string(), MAX_FUNCTION_LINES + 2)]
    );
}

#[test]
fn no_module_imports_one_that_imports_it() -> anyhow::Result<()> {
    let mut reports = Vec::new();
    for krate in workspace_crates()? {
        let graph = ModuleGraph::of(&krate);
        for circle in graph.circles() {
            reports.push(graph.describe(&krate.member, &circle));
        }
    }
    if !reports.is_empty() {
        bail!(
            "module import circles; move what they share to a module both can import:\n{}",
            reports.join("\n")
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reading the workspace
// ---------------------------------------------------------------------------------------------

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Every workspace member with its source files.
fn workspace_crates() -> anyhow::Result<Vec<Crate>> {
    let root = workspace_root();
    workspace_members(&root)?
        .into_iter()
        .map(|member| load_crate(&root, member))
        .collect()
}

/// The `members = [...]` list of the workspace manifest.
fn workspace_members(root: &Path) -> anyhow::Result<Vec<String>> {
    let manifest_path = root.join("Cargo.toml");
    let manifest = fs::read_to_string(&manifest_path)
        .with_context(|| format!("reading {}", manifest_path.display()))?;
    let list = manifest
        .split_once("members")
        .and_then(|(_, rest)| rest.split_once('['))
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
        .context("the workspace Cargo.toml has no `members = [...]` list")?;
    let members: Vec<String> = list
        .split(',')
        .map(|entry| entry.trim().trim_matches('"').to_string())
        .filter(|entry| !entry.is_empty())
        .collect();
    if members.is_empty() {
        bail!("the workspace members list is empty");
    }
    Ok(members)
}

/// Reads every `.rs` file under `<member>/src`.
fn load_crate(root: &Path, member: String) -> anyhow::Result<Crate> {
    let src = root.join(&member).join("src");
    let mut files = Vec::new();
    for path in rust_files(&src)? {
        let relative = path
            .strip_prefix(&src)
            .with_context(|| format!("{} is outside {}", path.display(), src.display()))?;
        let text =
            fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
        files.push(SourceFile {
            path: format!("{member}/src/{}", slash_path(relative)),
            under_src: relative.to_path_buf(),
            module: module_path(relative),
            code: blank_comments_and_literals(&text),
            text,
            test_only: false,
        });
    }
    mark_test_only(&mut files);
    Ok(Crate { member, files })
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    let entries = fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))?;
    for entry in entries {
        let path = entry
            .with_context(|| format!("listing {}", dir.display()))?
            .path();
        if path.is_dir() {
            found.extend(rust_files(&path)?);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

fn slash_path(path: &Path) -> String {
    path.components()
        .map(|part| part.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// The module a file's path under `src/` names: `dashboard/api.rs` is `dashboard::api`,
/// `dashboard/mod.rs` is `dashboard`, `lib.rs` and `main.rs` are the crate root.
fn module_path(relative_to_src: &Path) -> ModulePath {
    let mut parts: ModulePath = relative_to_src
        .with_extension("")
        .components()
        .map(|part| part.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(parts.as_slice(), [name] if name == "lib" || name == "main")
        || parts.last().is_some_and(|last| last == "mod")
    {
        parts.pop();
    }
    parts
}

/// The directory holding the files of a file's child modules: the file's own directory for
/// `mod.rs`, `lib.rs` and `main.rs`, else a directory named after the file.
fn child_directory(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(""));
    match file.file_stem().and_then(|stem| stem.to_str()) {
        Some("mod" | "lib" | "main") | None => parent.to_path_buf(),
        Some(stem) => parent.join(stem),
    }
}

// ---------------------------------------------------------------------------------------------
// Test code
// ---------------------------------------------------------------------------------------------

/// Marks the files declared `#[cfg(test)] mod x;` and every module below them as test-only.
fn mark_test_only(files: &mut [SourceFile]) {
    let declared: BTreeSet<PathBuf> = files
        .iter()
        .flat_map(|file| test_module_files(&file.under_src, &file.code, &file.text))
        .collect();
    let test_modules: Vec<ModulePath> = files
        .iter()
        .filter(|file| declared.contains(&file.under_src))
        .map(|file| file.module.clone())
        .collect();
    for file in files.iter_mut() {
        file.test_only = test_modules
            .iter()
            .any(|module| file.module.starts_with(module));
    }
}

/// The files (under `src/`) of the modules that `file` declares `#[cfg(test)] mod x;`.
/// `code` is the file's blanked text, `original` its text as written (for `#[path]`).
fn test_module_files(file: &Path, code: &str, original: &str) -> Vec<PathBuf> {
    let code_lines: Vec<&str> = code.lines().collect();
    let original_lines: Vec<&str> = original.lines().collect();
    let mut files = Vec::new();
    for start in (0..code_lines.len()).filter(|&at| is_test_attribute(code_lines[at])) {
        let end = item_end(&code_lines, start);
        let item = code_lines[start..=end].join(" ");
        let Some(name) = outline_module_name(&item) else {
            continue;
        };
        let written = original_lines
            .get(start..=end)
            .unwrap_or_default()
            .join(" ");
        match path_attribute(&written) {
            Some(path) => files.push(file.parent().unwrap_or(Path::new("")).join(path)),
            None => {
                let directory = child_directory(file);
                files.push(directory.join(format!("{name}.rs")));
                files.push(directory.join(&name).join("mod.rs"));
            }
        }
    }
    files
}

fn is_test_attribute(line: &str) -> bool {
    line.trim_start().starts_with("#[cfg(test)]")
}

/// The functions of `lines` (code with comments and literals blanked) that span more than
/// [`MAX_FUNCTION_LINES`] lines: their names and lengths. A declaration without a body is none.
fn long_functions(lines: &[&str]) -> Vec<(String, usize)> {
    let mut found = Vec::new();
    for (start, line) in lines.iter().enumerate() {
        let Some(name) = function_name(line) else {
            continue;
        };
        if let Some(length) = body_length(&lines[start..])
            && length > MAX_FUNCTION_LINES
        {
            found.push((name, length));
        }
    }
    found
}

/// The name of the function a line declares (`fn name`, after any qualifiers), if it does.
fn function_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word != "fn" {
            continue;
        }
        let name: String = words
            .next()?
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        return (!name.is_empty()).then_some(name);
    }
    None
}

/// The lines from a function's `fn` line to its closing brace; `None` for a declaration.
fn body_length(lines: &[&str]) -> Option<usize> {
    let mut depth = 0usize;
    let mut opened = false;
    // Brackets and parentheses of the signature (`[u8; 4]` holds a `;`).
    let mut nested = 0usize;
    for (offset, line) in lines.iter().enumerate() {
        for c in line.chars() {
            match c {
                '{' => {
                    depth += 1;
                    opened = true;
                }
                '}' => depth = depth.saturating_sub(1),
                '(' | '[' if !opened => nested += 1,
                ')' | ']' if !opened => nested = nested.saturating_sub(1),
                ';' if !opened && nested == 0 => return None,
                _ => {}
            }
            if opened && depth == 0 {
                return Some(offset + 1);
            }
        }
    }
    None
}

/// Marks the lines that belong to `#[cfg(test)]` items.
fn test_item_lines(lines: &[&str]) -> Vec<bool> {
    let mut in_test = vec![false; lines.len()];
    let mut at = 0;
    while at < lines.len() {
        if is_test_attribute(lines[at]) {
            let end = item_end(lines, at);
            in_test[at..=end].fill(true);
            at = end + 1;
        } else {
            at += 1;
        }
    }
    in_test
}

/// The last line of the item whose attributes start at line `start`: where a `;` ends it at
/// bracket depth zero, or where its closing `}` brings the depth back to zero.
fn item_end(lines: &[&str], start: usize) -> usize {
    let mut depth = 0i32;
    for (at, line) in lines.iter().enumerate().skip(start) {
        for c in line.chars() {
            match c {
                '(' | '[' | '{' => depth += 1,
                ')' | ']' => depth -= 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return at;
                    }
                }
                ';' if depth == 0 => return at,
                _ => {}
            }
        }
    }
    lines.len().saturating_sub(1)
}

/// The `x` of an item `mod x;` (a module in its own file).
fn outline_module_name(item: &str) -> Option<String> {
    let tokens = tokens(item);
    tokens.windows(3).find_map(|window| match window {
        [Token::Word(keyword), Token::Word(name), Token::Punct(';')] if keyword == "mod" => {
            Some(name.clone())
        }
        _ => None,
    })
}

/// The file named by a `#[path = "..."]` attribute in `text`.
fn path_attribute(text: &str) -> Option<&str> {
    let (_, rest) = text.split_once("#[path")?;
    let (_, rest) = rest.split_once('"')?;
    rest.split_once('"').map(|(path, _)| path)
}

/// `text` with comments and the contents of string and character literals replaced by spaces
/// (line breaks kept), so that neither braces in strings nor paths in doc links are read as code.
fn blank_comments_and_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    while at < chars.len() {
        let literal_end = match (chars[at], chars.get(at + 1).copied()) {
            ('/', Some('/')) => line_comment_end(&chars, at),
            ('/', Some('*')) => block_comment_end(&chars, at),
            ('"', _) => string_end(&chars, at),
            ('\'', _) => char_literal_end(&chars, at),
            ('r', _) if !continues_word(&chars, at) => raw_string_end(&chars, at),
            _ => None,
        };
        match literal_end {
            Some(end) => {
                out.extend(
                    chars[at..end]
                        .iter()
                        .map(|&c| if c == '\n' { '\n' } else { ' ' }),
                );
                at = end;
            }
            None => {
                out.push(chars[at]);
                at += 1;
            }
        }
    }
    out
}

/// Whether the character at `at` continues an identifier (so an `r` there is not a raw string).
fn continues_word(chars: &[char], at: usize) -> bool {
    let before = at.checked_sub(1).map(|before| chars[before]);
    match before {
        Some('b') => continues_word(chars, at - 1),
        Some(c) => c.is_alphanumeric() || c == '_',
        None => false,
    }
}

fn line_comment_end(chars: &[char], at: usize) -> Option<usize> {
    Some(
        chars[at..]
            .iter()
            .position(|&c| c == '\n')
            .map_or(chars.len(), |offset| at + offset),
    )
}

/// The end of a (possibly nested) block comment starting at `at`.
fn block_comment_end(chars: &[char], at: usize) -> Option<usize> {
    let mut depth = 0;
    let mut index = at;
    while index + 1 < chars.len() {
        match (chars[index], chars[index + 1]) {
            ('/', '*') => {
                depth += 1;
                index += 2;
            }
            ('*', '/') => {
                depth -= 1;
                index += 2;
                if depth == 0 {
                    return Some(index);
                }
            }
            _ => index += 1,
        }
    }
    Some(chars.len())
}

/// The end of a string literal whose opening quote is at `at`.
fn string_end(chars: &[char], at: usize) -> Option<usize> {
    let mut index = at + 1;
    while index < chars.len() {
        match chars[index] {
            '\\' => index += 2,
            '"' => return Some(index + 1),
            _ => index += 1,
        }
    }
    Some(chars.len())
}

/// The end of a character literal at `at`, or `None` for a lifetime (`'a`).
fn char_literal_end(chars: &[char], at: usize) -> Option<usize> {
    match (chars.get(at + 1), chars.get(at + 2)) {
        (Some('\\'), _) => chars[at + 2..]
            .iter()
            .position(|&c| c == '\'')
            .map(|offset| at + 2 + offset + 1),
        (Some(_), Some('\'')) => Some(at + 3),
        _ => None,
    }
}

/// The end of a raw string `r"…"` or `r#"…"#` starting at `at`, or `None` if the `r` starts
/// something else.
fn raw_string_end(chars: &[char], at: usize) -> Option<usize> {
    let hashes = chars[at + 1..].iter().take_while(|&&c| c == '#').count();
    if chars.get(at + 1 + hashes) != Some(&'"') {
        return None;
    }
    let body = at + 2 + hashes;
    (body..chars.len())
        .find(|&index| {
            chars[index] == '"'
                && chars[index + 1..]
                    .iter()
                    .take(hashes)
                    .filter(|&&c| c == '#')
                    .count()
                    == hashes
        })
        .map(|quote| quote + 1 + hashes)
        .or(Some(chars.len()))
}

// ---------------------------------------------------------------------------------------------
// Paths named in code
// ---------------------------------------------------------------------------------------------

/// A token of blanked Rust code, as much as path reading needs.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// An identifier, keyword or number.
    Word(String),
    /// `::`
    PathSep,
    Punct(char),
}

fn tokens(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut at = 0;
    while at < chars.len() {
        let c = chars[at];
        if c.is_alphanumeric() || c == '_' {
            let length = chars[at..]
                .iter()
                .take_while(|&&c| c.is_alphanumeric() || c == '_')
                .count();
            tokens.push(Token::Word(chars[at..at + length].iter().collect()));
            at += length;
        } else if c == ':' && chars.get(at + 1) == Some(&':') {
            tokens.push(Token::PathSep);
            at += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(Token::Punct(c));
            }
            at += 1;
        }
    }
    tokens
}

/// A path named in a file, with the inline modules (`mod x { … }`) it was named inside.
struct NamedPath {
    inline_modules: Vec<String>,
    segments: Vec<String>,
}

/// Every multi-segment path in `code`, and every path a `use` imports (group imports expanded).
fn named_paths(code: &str) -> Vec<NamedPath> {
    let tokens = tokens(code);
    let mut named = Vec::new();
    let mut depth = 0;
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let inline_modules = || inline.iter().map(|(name, _)| name.clone()).collect();
        match &tokens[at] {
            Token::Punct('{') => {
                depth += 1;
                at += 1;
            }
            Token::Punct('}') => {
                depth -= 1;
                if inline.last().is_some_and(|&(_, opened)| opened > depth) {
                    inline.pop();
                }
                at += 1;
            }
            Token::Word(word) if word == "mod" => match (tokens.get(at + 1), tokens.get(at + 2)) {
                (Some(Token::Word(name)), Some(Token::Punct('{'))) => {
                    depth += 1;
                    inline.push((name.clone(), depth));
                    at += 3;
                }
                _ => at += 1,
            },
            Token::Word(word) if word == "use" => {
                let mut imported = Vec::new();
                at = use_tree(&tokens, at + 1, &[], &mut imported);
                named.extend(imported.into_iter().map(|segments| NamedPath {
                    inline_modules: inline_modules(),
                    segments,
                }));
            }
            Token::Word(_) => {
                let (segments, next) = path_at(&tokens, at);
                if segments.len() > 1 {
                    named.push(NamedPath {
                        inline_modules: inline_modules(),
                        segments,
                    });
                }
                at = next;
            }
            _ => at += 1,
        }
    }
    named
}

/// The path `a::b::c` starting at `at`, and the index after it.
fn path_at(tokens: &[Token], at: usize) -> (Vec<String>, usize) {
    let mut segments = Vec::new();
    let mut next = at;
    while let Some(Token::Word(word)) = tokens.get(next) {
        segments.push(word.clone());
        next += 1;
        if tokens.get(next) == Some(&Token::PathSep)
            && matches!(tokens.get(next + 1), Some(Token::Word(_)))
        {
            next += 1;
        } else {
            break;
        }
    }
    (segments, next)
}

/// Reads the use tree at `at` below `prefix`, adding every imported path to `imported`;
/// returns the index after the tree.
fn use_tree(
    tokens: &[Token],
    mut at: usize,
    prefix: &[String],
    imported: &mut Vec<Vec<String>>,
) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match tokens.get(at) {
            Some(Token::Word(word)) if word == "as" => {
                at += 2;
                break;
            }
            // `use a::{self, …}` imports `a` itself.
            Some(Token::Word(word)) if word == "self" && !path.is_empty() => at += 1,
            Some(Token::Word(word)) => {
                path.push(word.clone());
                at += 1;
            }
            Some(Token::PathSep) => at += 1,
            Some(Token::Punct('*')) => {
                at += 1;
                break;
            }
            Some(Token::Punct('{')) => return use_group(tokens, at + 1, &path, imported),
            _ => break,
        }
    }
    imported.push(path);
    at
}

/// Reads the trees of a `{…}` group whose contents start at `at`.
fn use_group(
    tokens: &[Token],
    mut at: usize,
    prefix: &[String],
    imported: &mut Vec<Vec<String>>,
) -> usize {
    loop {
        match tokens.get(at) {
            Some(Token::Punct('}')) => return at + 1,
            Some(Token::Punct(',')) => at += 1,
            None => return at,
            Some(_) => {
                let next = use_tree(tokens, at, prefix, imported);
                if next == at {
                    return at;
                }
                at = next;
            }
        }
    }
}

/// The absolute module path a path named in module `current` points to, if it starts at this
/// crate: `crate::…`, `self::…`, `super::…`, or a child module of `current` by its bare name.
fn resolve(
    segments: &[String],
    current: &[String],
    modules: &BTreeSet<ModulePath>,
) -> Option<ModulePath> {
    let first = segments.first()?;
    let (mut absolute, rest): (ModulePath, &[String]) = match first.as_str() {
        "crate" => (Vec::new(), &segments[1..]),
        "self" => (current.to_vec(), &segments[1..]),
        "super" => {
            let ups = segments
                .iter()
                .take_while(|segment| *segment == "super")
                .count();
            let kept = current.len().checked_sub(ups)?;
            (current[..kept].to_vec(), &segments[ups..])
        }
        child => {
            let mut child_module = current.to_vec();
            child_module.push(child.to_string());
            if !modules.contains(&child_module) {
                return None;
            }
            (current.to_vec(), segments)
        }
    };
    absolute.extend(rest.iter().cloned());
    Some(absolute)
}

/// The file module holding `absolute`: its longest prefix that is a file module.
fn owning_module(absolute: &[String], modules: &BTreeSet<ModulePath>) -> ModulePath {
    (0..=absolute.len())
        .rev()
        .map(|length| absolute[..length].to_vec())
        .find(|prefix| modules.contains(prefix))
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// The module graph
// ---------------------------------------------------------------------------------------------

/// The file modules of a crate's normal build and which depends on which.
struct ModuleGraph<'a> {
    files: Vec<&'a SourceFile>,
    /// `(from, to)` indexes into `files`, with the first path that made the dependency.
    edges: BTreeMap<(usize, usize), String>,
}

impl<'a> ModuleGraph<'a> {
    fn of(krate: &'a Crate) -> Self {
        let files: Vec<&SourceFile> = krate.files.iter().filter(|file| !file.test_only).collect();
        let index: BTreeMap<&ModulePath, usize> = files
            .iter()
            .enumerate()
            .map(|(at, file)| (&file.module, at))
            .collect();
        let modules: BTreeSet<ModulePath> = files.iter().map(|file| file.module.clone()).collect();
        let mut edges = BTreeMap::new();
        for (from, file) in files.iter().enumerate() {
            let code = file.non_test_lines().join("\n");
            for named in named_paths(&code) {
                let mut current = file.module.clone();
                current.extend(named.inline_modules.iter().cloned());
                let Some(absolute) = resolve(&named.segments, &current, &modules) else {
                    continue;
                };
                let target = owning_module(&absolute, &modules);
                if file.module.starts_with(&target) {
                    continue; // itself or an ancestor: see the parent↔child rule
                }
                if let Some(&to) = index.get(&target) {
                    edges
                        .entry((from, to))
                        .or_insert_with(|| named.segments.join("::"));
                }
            }
        }
        ModuleGraph { files, edges }
    }

    /// The modules reachable from `start` (itself included).
    fn reachable(&self, start: usize) -> BTreeSet<usize> {
        let mut seen = BTreeSet::from([start]);
        let mut pending = vec![start];
        while let Some(node) = pending.pop() {
            for &(_, to) in self.edges.keys().filter(|(from, _)| *from == node) {
                if seen.insert(to) {
                    pending.push(to);
                }
            }
        }
        seen
    }

    /// Every strongly connected component of more than one module.
    fn circles(&self) -> Vec<Vec<usize>> {
        let reach: Vec<BTreeSet<usize>> = (0..self.files.len())
            .map(|node| self.reachable(node))
            .collect();
        let mut placed = BTreeSet::new();
        let mut circles = Vec::new();
        for node in 0..self.files.len() {
            if placed.contains(&node) {
                continue;
            }
            let component: Vec<usize> = reach[node]
                .iter()
                .copied()
                .filter(|&other| reach[other].contains(&node))
                .collect();
            placed.extend(component.iter().copied());
            if component.len() > 1 {
                circles.push(component);
            }
        }
        circles
    }

    /// The workspace paths of the files of `nodes`.
    fn paths(&self, nodes: &[usize]) -> Vec<&str> {
        nodes
            .iter()
            .map(|&node| self.files[node].path.as_str())
            .collect()
    }

    /// The circle's files and the dependencies between them.
    fn describe(&self, member: &str, circle: &[usize]) -> String {
        let mut text = format!("  in {member}: {}", self.paths(circle).join(" ↔ "));
        for ((from, to), evidence) in &self.edges {
            if circle.contains(from) && circle.contains(to) {
                text.push_str(&format!(
                    "\n      {} → {} ({evidence})",
                    self.files[*from].path, self.files[*to].path
                ));
            }
        }
        text
    }
}

// ---------------------------------------------------------------------------------------------
// The readers themselves
// ---------------------------------------------------------------------------------------------

#[test]
fn use_groups_expand_to_every_imported_path() {
    let paths: Vec<String> =
        named_paths("use crate::a::{self, b::{C, d as e}};\nlet x = super::f::g();")
            .into_iter()
            .map(|named| named.segments.join("::"))
            .collect();
    assert_eq!(
        paths,
        [
            "crate::a",
            "crate::a::b::C",
            "crate::a::b::d",
            "super::f::g"
        ]
    );
}

#[test]
fn comments_strings_and_doc_links_are_not_code() {
    let code = blank_comments_and_literals(
        "/// see [`x`](crate::x)\nlet s = \"crate::y {\"; // crate::z\nlet c = '{'; let r = r#\"}\"#;\n",
    );
    assert!(!code.contains("crate::"), "{code}");
    assert!(!code.contains(['{', '}']), "{code}");
    assert_eq!(code.lines().count(), 3);
}

#[test]
fn test_items_are_not_counted_wherever_they_are() {
    let lines = [
        "fn a() {}",
        "#[cfg(test)]",
        "fn helper() {",
        "}",
        "fn b() {}",
        "#[cfg(test)]",
        "mod tests {",
        "    fn c() {}",
        "}",
    ];
    let in_test = test_item_lines(&lines);
    assert_eq!(
        in_test,
        [false, true, true, true, false, true, true, true, true]
    );
}
