//! No file imports from a file that imports from it (STYLE 20): the import
//! graph between the source files of every workspace crate has no circle.
//!
//! A file's imports are the `crate::`, `self::` and `super::` paths it
//! names (in `use` trees and inline, tests included; comments and string
//! literals are not code) and `use` paths that start with one of its own
//! child modules. A path names the deepest module file it reaches; a name
//! the crate root re-exports (`pub use cycle::CycleView;` in `lib.rs`, so
//! `crate::CycleView`) names the file the root takes it from. The crate
//! root itself (`lib.rs`, `main.rs`) declares and re-exports every module,
//! so it is no node of the graph; likewise a module's `pub use` of its own
//! child module's items is its facade, not an import (the child may still
//! import from its parent; the parent's code may not then use the child).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A module path inside one crate (`["run_queue", "slot_claim"]`).
type ModulePath = Vec<String>;

/// One crate's source files by module path, the root's file excluded.
pub struct CrateSources {
    /// The crate's name, for messages.
    pub name: String,
    /// Module path -> (file path relative to the workspace, text).
    pub files: BTreeMap<ModulePath, (String, String)>,
    /// The crate root's text (`lib.rs`, else `main.rs`).
    pub root: String,
}

/// Every workspace crate with a library or binary root: `crates/*/src`
/// and `xtask/src`. `src/bin/*.rs` are crate roots of their own that reach
/// the library only by its name, so they are no part of its graph.
pub fn workspace_crates(workspace: &Path) -> Vec<CrateSources> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(workspace.join("crates"))
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                .filter(|path| path.join("src").is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.push(workspace.join("xtask"));
    dirs.sort();
    dirs.iter()
        .filter_map(|dir| read_crate(workspace, dir))
        .collect()
}

fn read_crate(workspace: &Path, dir: &Path) -> Option<CrateSources> {
    let src = dir.join("src");
    let root_file = ["lib.rs", "main.rs"]
        .iter()
        .map(|name| src.join(name))
        .find(|path| path.is_file())?;
    let root = std::fs::read_to_string(&root_file).ok()?;
    let mut files = BTreeMap::new();
    let mut folders = vec![src.clone()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for path in entries.filter_map(|entry| entry.ok().map(|entry| entry.path())) {
            let relative = path.strip_prefix(&src).unwrap_or(&path).to_path_buf();
            if path.is_dir() {
                if relative != Path::new("bin") {
                    folders.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") || path == root_file {
                continue;
            }
            let mut module: ModulePath = relative
                .with_extension("")
                .components()
                .map(|part| part.as_os_str().to_string_lossy().into_owned())
                .collect();
            if module.last().is_some_and(|last| last == "mod") {
                module.pop();
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let shown = path
                .strip_prefix(workspace)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            files.insert(module, (shown, text));
        }
    }
    let name = dir
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    Some(CrateSources { name, files, root })
}

/// Every circle of the crate's file graph: one message per strongly
/// connected component of more than one file, naming one circle in it.
pub fn circles(krate: &CrateSources) -> Vec<String> {
    let graph = import_graph(krate);
    let mut messages = Vec::new();
    for component in strongly_connected(&graph) {
        if component.len() < 2 {
            continue;
        }
        let circle = one_circle(&graph, &component);
        let names: Vec<&str> = circle
            .iter()
            .map(|module| krate.files[module].0.as_str())
            .collect();
        messages.push(format!(
            "{}: file circle {} -> {}",
            krate.name,
            names.join(" -> "),
            names[0]
        ));
    }
    messages
}

/// File (module path) -> the files it imports from.
pub fn import_graph(krate: &CrateSources) -> BTreeMap<ModulePath, BTreeSet<ModulePath>> {
    let modules: BTreeSet<ModulePath> = krate.files.keys().cloned().collect();
    let root_exports = root_exports(&krate.root, &modules);
    let mut graph = BTreeMap::new();
    for (module, (_, text)) in &krate.files {
        let mut targets = BTreeSet::new();
        for found in paths(text) {
            let mut here = module.clone();
            here.extend(found.scope);
            let Some(absolute) = absolute(&here, &found.path, &modules) else {
                continue;
            };
            let Some(target) = resolve(&absolute, &modules, &root_exports) else {
                continue;
            };
            let facade = found.re_export && target.starts_with(module);
            if &target != module && !facade {
                targets.insert(target);
            }
        }
        graph.insert(module.clone(), targets);
    }
    graph
}

/// The names the crate root re-exports from a module file: `pub use
/// cycle::{CycleView, MAX_CYCLE_LENGTH};` maps `CycleView` to `cycle`.
fn root_exports(root: &str, modules: &BTreeSet<ModulePath>) -> BTreeMap<String, ModulePath> {
    let mut exports = BTreeMap::new();
    for found in paths(root) {
        if !found.scope.is_empty() || found.path.len() < 2 {
            continue;
        }
        let Some(absolute) = absolute(&[], &found.path, modules) else {
            continue;
        };
        let Some(name) = absolute.last() else {
            continue;
        };
        if let Some(target) = deepest_module(&absolute, modules) {
            exports.entry(name.clone()).or_insert(target);
        }
    }
    exports
}

/// `path` made absolute from inside module `here`: `crate::` from the root,
/// `self::`/`super::` from `here`, a first segment that is a child module
/// of `here` from `here`; `None` for anything else (another crate).
fn absolute(
    here: &[String],
    path: &[String],
    modules: &BTreeSet<ModulePath>,
) -> Option<ModulePath> {
    let (first, rest) = path.split_first()?;
    let mut base: ModulePath = match first.as_str() {
        "crate" => Vec::new(),
        "self" => here.to_vec(),
        "super" => {
            let mut base = here.to_vec();
            base.pop()?;
            base
        }
        _ => {
            let mut child = here.to_vec();
            child.push(first.clone());
            if !modules.contains(&child) {
                return None;
            }
            child.extend(rest.iter().cloned());
            return Some(child);
        }
    };
    let mut rest = rest.iter().peekable();
    while rest.peek().is_some_and(|segment| *segment == "super") {
        rest.next();
        base.pop()?;
    }
    base.extend(rest.cloned());
    Some(base)
}

/// The file an absolute path names: its deepest module file, or, for a
/// name of the root, the file the root re-exports it from.
fn resolve(
    absolute: &[String],
    modules: &BTreeSet<ModulePath>,
    root_exports: &BTreeMap<String, ModulePath>,
) -> Option<ModulePath> {
    deepest_module(absolute, modules).or_else(|| {
        absolute
            .first()
            .and_then(|name| root_exports.get(name).cloned())
    })
}

fn deepest_module(absolute: &[String], modules: &BTreeSet<ModulePath>) -> Option<ModulePath> {
    (1..=absolute.len())
        .rev()
        .map(|length| absolute[..length].to_vec())
        .find(|prefix| modules.contains(prefix))
}

/// A path a file names that may be an import.
pub struct FoundPath {
    /// The inline modules (`mod tests { ... }`) it is written in.
    pub scope: ModulePath,
    /// The path as written (`["super", "cycle", "CycleView"]`).
    pub path: ModulePath,
    /// Whether it is a leaf of a `pub use` (any visibility) tree.
    pub re_export: bool,
}

/// Every path a file names that may be an import: the leaves of `use`
/// trees, and `crate::`/`self::`/`super::` paths anywhere in the code.
pub fn paths(text: &str) -> Vec<FoundPath> {
    let tokens = tokens(&strip(text));
    let mut found = Vec::new();
    // Inline modules open at a brace depth.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut pending_module: Option<String> = None;
    let mut index = 0;
    while index < tokens.len() {
        let token = tokens[index].as_str();
        match token {
            "{" => {
                depth += 1;
                if let Some(name) = pending_module.take() {
                    scope.push((name, depth));
                }
            }
            "}" => {
                if scope.last().is_some_and(|(_, open)| *open == depth) {
                    scope.pop();
                }
                depth = depth.saturating_sub(1);
            }
            ";" => pending_module = None,
            "mod" => {
                if let Some(name) = tokens.get(index + 1).filter(|name| is_ident(name)) {
                    pending_module = Some(name.clone());
                }
            }
            _ => {}
        }
        let here: ModulePath = scope.iter().map(|(name, _)| name.clone()).collect();
        if token == "use" {
            let re_export = index >= 1
                && (tokens[index - 1] == "pub"
                    || (tokens[index - 1] == ")"
                        && tokens[..index].iter().rev().take(5).any(|t| t == "pub")));
            let mut leaves = Vec::new();
            index = use_tree(&tokens, index + 1, Vec::new(), &mut leaves);
            found.extend(leaves.into_iter().map(|path| FoundPath {
                scope: here.clone(),
                path,
                re_export,
            }));
            continue;
        }
        let starts_path = matches!(token, "crate" | "self" | "super")
            && tokens.get(index + 1).is_some_and(|next| next == "::")
            && (index == 0 || tokens[index - 1] != "::");
        if starts_path {
            let mut path = vec![token.to_owned()];
            let mut at = index + 1;
            while tokens.get(at).is_some_and(|t| t == "::")
                && tokens.get(at + 1).is_some_and(|t| is_ident(t))
            {
                path.push(tokens[at + 1].clone());
                at += 2;
            }
            if tokens.get(at).is_some_and(|t| t == "::")
                && tokens.get(at + 1).is_some_and(|t| t == "{")
            {
                let mut leaves = Vec::new();
                at = use_tree(&tokens, at + 1, path, &mut leaves);
                found.extend(leaves.into_iter().map(|path| FoundPath {
                    scope: here.clone(),
                    path,
                    re_export: false,
                }));
            } else {
                found.push(FoundPath {
                    scope: here.clone(),
                    path,
                    re_export: false,
                });
            }
            index = at;
            continue;
        }
        index += 1;
    }
    found
}

/// Parses a `use` tree from `tokens[at]` with `prefix` before it; pushes
/// its leaves; returns the index after it.
fn use_tree(
    tokens: &[String],
    mut at: usize,
    prefix: ModulePath,
    leaves: &mut Vec<ModulePath>,
) -> usize {
    let mut path = prefix;
    loop {
        match tokens.get(at).map(String::as_str) {
            Some("{") => {
                at += 1;
                loop {
                    match tokens.get(at).map(String::as_str) {
                        None => return at,
                        Some("}") => return at + 1,
                        Some(",") => at += 1,
                        _ => at = use_tree(tokens, at, path.clone(), leaves),
                    }
                }
            }
            Some("::") => at += 1,
            Some("*") => {
                leaves.push(path);
                return at + 1;
            }
            Some("as") => {
                // `as name`: the alias is no part of the path.
                at += 2;
            }
            Some(token) if is_ident(token) => {
                path.push(token.to_owned());
                at += 1;
            }
            _ => {
                if !path.is_empty() {
                    leaves.push(path);
                }
                return at;
            }
        }
    }
}

fn is_ident(token: &str) -> bool {
    token
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && token.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Identifiers, `::` and single punctuation characters.
fn tokens(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        if c.is_whitespace() {
            index += 1;
        } else if c.is_ascii_alphanumeric() || c == '_' {
            let start = index;
            while index < chars.len()
                && (chars[index].is_ascii_alphanumeric() || chars[index] == '_')
            {
                index += 1;
            }
            tokens.push(chars[start..index].iter().collect());
        } else if c == ':' && chars.get(index + 1) == Some(&':') {
            tokens.push("::".to_owned());
            index += 2;
        } else {
            tokens.push(c.to_string());
            index += 1;
        }
    }
    tokens
}

/// The code without comments, string literals and character literals (each
/// replaced by a space).
pub fn strip(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut index = 0;
    while index < chars.len() {
        let c = chars[index];
        let next = chars.get(index + 1).copied();
        if c == '/' && next == Some('/') {
            while index < chars.len() && chars[index] != '\n' {
                index += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut nesting = 0usize;
            while index < chars.len() {
                if chars[index] == '/' && chars.get(index + 1) == Some(&'*') {
                    nesting += 1;
                    index += 2;
                } else if chars[index] == '*' && chars.get(index + 1) == Some(&'/') {
                    nesting -= 1;
                    index += 2;
                    if nesting == 0 {
                        break;
                    }
                } else {
                    index += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (next == Some('"') || next == Some('#'))
            && (index == 0 || !is_ident_char(chars[index - 1]))
        {
            // A raw string r"..." or r#"..."#.
            let mut at = index + 1;
            let mut hashes = 0;
            while chars.get(at) == Some(&'#') {
                hashes += 1;
                at += 1;
            }
            if chars.get(at) != Some(&'"') {
                out.push(c);
                index += 1;
                continue;
            }
            at += 1;
            loop {
                match chars.get(at) {
                    None => break,
                    Some('"') if (1..=hashes).all(|n| chars.get(at + n) == Some(&'#')) => {
                        at += 1 + hashes;
                        break;
                    }
                    _ => at += 1,
                }
            }
            index = at;
            out.push(' ');
        } else if c == '"' {
            index += 1;
            while index < chars.len() && chars[index] != '"' {
                if chars[index] == '\\' {
                    index += 1;
                }
                index += 1;
            }
            index += 1;
            out.push(' ');
        } else if c == '\'' && (next == Some('\\') || chars.get(index + 2) == Some(&'\'')) {
            // A character literal ('a', '\n', '\u{1F600}'); 'a alone is a lifetime.
            index += 1;
            while index < chars.len() && chars[index] != '\'' {
                if chars[index] == '\\' {
                    index += 1;
                }
                index += 1;
            }
            index += 1;
            out.push(' ');
        } else {
            out.push(c);
            index += 1;
        }
    }
    out
}

fn is_ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// Tarjan's strongly connected components.
fn strongly_connected(graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>) -> Vec<Vec<ModulePath>> {
    struct State<'a> {
        graph: &'a BTreeMap<ModulePath, BTreeSet<ModulePath>>,
        index: BTreeMap<&'a ModulePath, usize>,
        low: BTreeMap<&'a ModulePath, usize>,
        stack: Vec<&'a ModulePath>,
        on_stack: BTreeSet<&'a ModulePath>,
        next: usize,
        components: Vec<Vec<ModulePath>>,
    }
    fn visit<'a>(state: &mut State<'a>, node: &'a ModulePath) {
        state.index.insert(node, state.next);
        state.low.insert(node, state.next);
        state.next += 1;
        state.stack.push(node);
        state.on_stack.insert(node);
        let graph = state.graph;
        for target in graph.get(node).into_iter().flatten() {
            let Some((target, _)) = graph.get_key_value(target) else {
                continue;
            };
            if !state.index.contains_key(target) {
                visit(state, target);
                let low = state.low[target].min(state.low[node]);
                state.low.insert(node, low);
            } else if state.on_stack.contains(target) {
                let low = state.index[target].min(state.low[node]);
                state.low.insert(node, low);
            }
        }
        if state.low[node] == state.index[node] {
            let mut component = Vec::new();
            while let Some(member) = state.stack.pop() {
                state.on_stack.remove(member);
                component.push(member.clone());
                if member == node {
                    break;
                }
            }
            component.sort();
            state.components.push(component);
        }
    }
    let mut state = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        components: Vec::new(),
    };
    for node in graph.keys() {
        if !state.index.contains_key(node) {
            visit(&mut state, node);
        }
    }
    state.components.sort();
    state.components
}

/// A shortest circle through the component's first file.
fn one_circle(
    graph: &BTreeMap<ModulePath, BTreeSet<ModulePath>>,
    component: &[ModulePath],
) -> Vec<ModulePath> {
    let members: BTreeSet<&ModulePath> = component.iter().collect();
    let start = &component[0];
    let mut parent: BTreeMap<&ModulePath, &ModulePath> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut seen = BTreeSet::from([start]);
    while let Some(node) = queue.pop_front() {
        for target in graph.get(node).into_iter().flatten() {
            if target == start {
                let mut circle = vec![node.clone()];
                let mut current = node;
                while let Some(previous) = parent.get(current) {
                    circle.push((*previous).clone());
                    current = previous;
                }
                circle.reverse();
                return circle;
            }
            if members.contains(target) && seen.insert(target) {
                parent.insert(target, node);
                queue.push_back(target);
            }
        }
    }
    component.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn krate(files: &[(&str, &str)], root: &str) -> CrateSources {
        CrateSources {
            name: "demo".to_owned(),
            files: files
                .iter()
                .map(|(module, text)| {
                    let path: ModulePath = module.split("::").map(str::to_owned).collect();
                    (
                        path,
                        (
                            format!("src/{}.rs", module.replace("::", "/")),
                            (*text).to_owned(),
                        ),
                    )
                })
                .collect(),
            root: root.to_owned(),
        }
    }

    fn edges(files: &[(&str, &str)], root: &str) -> Vec<String> {
        import_graph(&krate(files, root))
            .into_iter()
            .flat_map(|(from, to)| {
                to.into_iter()
                    .map(move |to| format!("{} -> {}", from.join("::"), to.join("::")))
            })
            .collect()
    }

    #[test]
    fn imports_are_found_in_use_trees_inline_paths_and_root_re_exports() {
        let root = "mod a; mod b; mod c; mod d; pub use c::{Gamma, other::Delta as D};";
        let files = [
            (
                "a",
                "use crate::{b::Beta, Gamma};\nfn f() { crate::d::run(); }",
            ),
            (
                "b",
                "// use crate::a::Alpha;\nconst S: &str = \"crate::a::X\";",
            ),
            ("c", "pub struct Gamma;"),
            (
                "d",
                "#[cfg(test)]\nmod tests {\n    use super::*;\n    use super::super::b::Beta;\n}",
            ),
        ];
        assert_eq!(
            edges(&files, root),
            ["a -> b", "a -> c", "a -> d", "d -> b"]
        );
    }

    #[test]
    fn child_modules_and_super_resolve_to_their_files() {
        let files = [
            (
                "run_queue",
                "mod enqueue; mod slot_claim;\npub use enqueue::Enqueue;\nuse slot_claim::Claim;",
            ),
            (
                "run_queue::slot_claim",
                "use super::Queue;\nuse crate::run_queue::enqueue;",
            ),
            ("run_queue::enqueue", "use super::slot_claim::Claim;"),
        ];
        // run_queue's `pub use` of its child is its facade, not an import.
        assert_eq!(
            edges(&files, "mod run_queue;"),
            [
                "run_queue -> run_queue::slot_claim",
                "run_queue::enqueue -> run_queue::slot_claim",
                "run_queue::slot_claim -> run_queue",
                "run_queue::slot_claim -> run_queue::enqueue",
            ]
        );
    }

    #[test]
    fn a_circle_is_named_and_a_chain_is_not() {
        let files = [
            ("a", "use crate::b::B;"),
            ("b", "use crate::c::C;"),
            ("c", "fn f() -> crate::a::A { todo() }"),
            ("d", "use crate::a::A;"),
        ];
        assert_eq!(
            circles(&krate(&files, "")),
            ["demo: file circle src/a.rs -> src/b.rs -> src/c.rs -> src/a.rs"]
        );
        assert!(circles(&krate(&files[..2], "")).is_empty());
    }

    #[test]
    fn lifetimes_raw_strings_and_nested_comments_are_not_code() {
        assert_eq!(
            strip("fn f<'a>(x: &'a str) -> char { 'x' } r#\"crate::a\"# /* /* crate::b */ */ c"),
            "fn f<'a>(x: &'a str) -> char {   }     c"
        );
    }

    /// STYLE 20 for every workspace crate.
    #[test]
    fn no_workspace_crate_has_a_file_circle() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let crates = workspace_crates(&workspace);
        let names: Vec<&str> = crates.iter().map(|krate| krate.name.as_str()).collect();
        for expected in [
            "statek-policy",
            "statek-store-pg",
            "statek-scheduler",
            "statek-cli",
            "xtask",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} not scanned: {names:?}"
            );
        }
        let found: Vec<String> = crates.iter().flat_map(circles).collect();
        assert!(
            found.is_empty(),
            "files that import from a file that imports from them (STYLE 20; give the \
             shared part a module of its own below both):\n  {}",
            found.join("\n  ")
        );
    }
}
