//! The parsed path: one iterative walk over the tree-sitter CST that writes the canonical
//! form, extracts parameters with their context names and reads tool calls. No recursion:
//! ancestors live in an explicit stack, so nesting depth costs heap, never the thread stack.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};

use tree_sitter::{Node, Tree, TreeCursor};

use super::bindings;
use super::canonical::{self, Canonical};
use super::fallback;
use super::grammar::Grammar;
use super::language::Lang;
use super::literal::{self, JsonType};
use super::naming;
use super::secrets;
use super::{RawParam, WalkError, MAX_PARAMS};

/// Receivers whose method calls are tool calls: `mcp.read_file(...)`, `tools.x(...)`.
pub const TOOL_ROOTS: &[&str] = &["mcp", "tools"];
/// Generic dispatch methods whose first (string) argument names the tool.
pub const DISPATCH_METHODS: &[&str] = &["call", "callTool", "call_tool", "invoke"];
/// Literal containers `context_name` looks through: their items take the container's name.
const ARRAY_KINDS: &[&str] = &["array", "list", "tuple", "set"];
/// Maps written in place, whose values a subscript or a property reads (`{"k": v}["k"]`).
const MAP_KINDS: &[&str] = &["dictionary", "object"];
/// Lists and maps written in place, in which a list or a map read may be nested.
const CONTAINER_KINDS: &[&str] = &["array", "list", "tuple", "set", "dictionary", "object"];
/// Expressions whose value is made of some of their children's (`joined_by`): a credential
/// given as one gives each of those as a credential (docs/normalization.md, Secrets).
const JOIN_KINDS: &[&str] = &[
    "parenthesized_expression",
    "concatenated_string",
    "binary_expression",
    "binary_operator",
    "ternary_expression",
    "conditional_expression",
    // formatting calls (`format_call`) and their callee and arguments
    "call",
    "call_expression",
    "attribute",
    "member_expression",
    "argument_list",
    "arguments",
    "keyword_argument",
    // a subscript or slice of a value (`pw[:8]`, `pw[0]`)
    "subscript",
    "subscript_expression",
    // interpolated strings and their interpolations (`f"{pw}..."`, `` `${pw}...` ``)
    "string",
    "template_string",
    "interpolation",
    "template_substitution",
];
/// Longest member chain read for a tool name (`mcp.server.tool` is 2).
pub(crate) const MAX_CHAIN: usize = 8;

/// The names along a callee rooted at a tool root, root excluded (docs/normalization.md, Tool
/// calls): `mcp.a.b` -> `[a, b]`. A subscript by a string literal reads as a member, so a tool
/// whose name is no identifier is still named: `mcp["get-weather"]` -> `[get-weather]`,
/// `tools.github["create-issue"]` -> `[github, create-issue]`. None for any other callee (a
/// computed subscript, another receiver, a chain longer than `MAX_CHAIN`).
pub(crate) fn tool_chain<'a>(
    grammar: &Grammar,
    code: &'a str,
    lang: Lang,
    function: Node<'_>,
) -> Option<Vec<Cow<'a, str>>> {
    let text = |n: Node<'_>| &code[n.byte_range()];
    let mut segments: Vec<Cow<'a, str>> = Vec::new();
    let mut current = function;
    loop {
        // (the object's field, the name's field, whether the name is a string literal)
        let (object, field, literal) = match grammar.kind(current) {
            "member_expression" => ("object", "property", false),
            "attribute" => ("object", "attribute", false),
            "subscript_expression" => ("object", "index", true),
            "subscript" => ("value", "subscript", true),
            "identifier" => break,
            _ => return None,
        };
        let next = grammar.child(current, object)?;
        let node = grammar.child(current, field)?;
        let name = if literal {
            Cow::Owned(string_literal(grammar, code, lang, node)?)
        } else {
            Cow::Borrowed(text(node))
        };
        segments.push(name);
        if segments.len() > MAX_CHAIN {
            return None;
        }
        current = next;
    }
    if !TOOL_ROOTS.contains(&text(current)) {
        return None;
    }
    segments.reverse();
    Some(segments)
}

/// The value of a plain string literal node (no interpolation: a JS template string without
/// `${...}` is one), decoded.
fn string_literal(grammar: &Grammar, code: &str, lang: Lang, node: Node<'_>) -> Option<String> {
    match grammar.kind(node) {
        "string" => {}
        "template_string" if !lang.is_python() => {
            let mut cursor = node.walk();
            let interpolated = node
                .named_children(&mut cursor)
                .any(|c| grammar.kind(c) == "template_substitution");
            if interpolated {
                return None;
            }
        }
        _ => return None,
    }
    let raw = &code[node.byte_range()];
    if lang.is_python() {
        literal::decode_py_string(raw)
    } else {
        literal::decode_js_string(raw)
    }
}

/// Verbs of a tool caller (`is_tool_caller`).
const TOOL_CALLER_VERBS: &[&[u8]] = &[b"call", b"invoke", b"run", b"execute", b"use"];

/// A function or method that, whatever its receiver, calls the tool its argument names
/// (docs/normalization.md, Tool calls): an MCP SDK client's `session.call_tool("get_weather",
/// {...})` and `client.callTool({name: "get-weather", arguments: {...}})`, a generated
/// wrapper's `callMCPTool("drive__get_document", input)`. A verb (`call`, `invoke`, `run`,
/// `execute`, `use`), then `tool` or `mcp_tool`, in any case, underscores ignored.
pub(crate) fn is_tool_caller(name: &str) -> bool {
    let bytes = name.as_bytes();
    if bytes.len() < 7
        || bytes.len() > 24
        || !bytes[bytes.len() - 4..].eq_ignore_ascii_case(b"tool")
    {
        return false;
    }
    let folded: Vec<u8> = bytes
        .iter()
        .filter(|&&b| b != b'_')
        .map(u8::to_ascii_lowercase)
        .collect();
    TOOL_CALLER_VERBS.iter().any(|verb| {
        folded
            .strip_prefix(*verb)
            .is_some_and(|rest| rest == b"tool" || rest == b"mcptool")
    })
}

/// Where a tool call's arguments are (what its step reads).
pub(crate) enum ToolArguments<'t> {
    /// Every argument of the call: `mcp.read_file({path})`.
    All,
    /// Every argument after the first, which names the tool: `mcp.call("read_file", {path})`.
    AfterName,
    /// One node: `client.callTool({name, arguments: {path}})`, `call_tool(.., arguments={..})`.
    Node(Node<'t>),
    /// None given: `client.callTool({name: "list_files"})`.
    Empty,
}

/// A call that statically names a tool (docs/normalization.md, Tool calls).
pub(crate) struct ToolCall<'t> {
    /// `server:tool`, or the tool alone.
    pub tool: String,
    /// The string literal that names the tool, when one does: it is code, never a parameter,
    /// so that calls of two tools never hash alike.
    pub name_literal: Option<Node<'t>>,
    pub arguments: ToolArguments<'t>,
}

/// The tool `call` names: through a tool root (`mcp.x(...)`, `tools.server.x(...)`,
/// `mcp["get-weather"](...)`, a dispatch method `mcp.call("x", ...)`), or through a tool caller
/// (`is_tool_caller`) whatever its receiver. A dispatch or a caller reads its tool's name from
/// its first argument when that is a string literal, else from the `name` of an object (or
/// dict) passed first, else (Python) from a `name=` keyword; a computed name is no tool call.
/// The tree walk, the step reader and their tests all read calls through this one function.
pub(crate) fn tool_call<'t>(
    grammar: &Grammar,
    code: &str,
    lang: Lang,
    call: Node<'t>,
) -> Option<ToolCall<'t>> {
    let mut function = grammar.child(call, "function")?;
    // tree-sitter-typescript reads `await mcp.a<T>(...)` as a call of `await mcp.a`: the call
    // is `mcp.a<T>(...)`, awaited. Only a tool named by the chain is read through it; a dispatch
    // or tool caller written so keeps its tool name a parameter, as stored hashes have it
    // (docs/normalization.md, Tool calls).
    let awaited = grammar.kind(function) == "await_expression"
        && grammar.child(call, "type_arguments").is_some();
    if awaited {
        function = function.named_child(0)?;
    }
    if let Some(segments) = tool_chain(grammar, code, lang, function) {
        let (last, server) = segments.split_last()?;
        if !DISPATCH_METHODS.contains(&last.as_ref()) {
            return Some(ToolCall {
                tool: segments.join(":"),
                name_literal: None,
                arguments: ToolArguments::All,
            });
        }
        if awaited {
            return None;
        }
        let named = named_by_argument(grammar, code, lang, call)?;
        if server.is_empty() {
            return Some(named);
        }
        return Some(ToolCall {
            tool: format!("{}:{}", server.join(":"), named.tool),
            ..named
        });
    }
    let last = match grammar.kind(function) {
        "identifier" => function,
        "member_expression" => grammar.child(function, "property")?,
        "attribute" => grammar.child(function, "attribute")?,
        _ => return None,
    };
    if awaited || !is_tool_caller(&code[last.byte_range()]) {
        return None;
    }
    named_by_argument(grammar, code, lang, call)
}

/// A dispatch's or a tool caller's tool, named by its arguments (`tool_call`).
fn named_by_argument<'t>(
    grammar: &Grammar,
    code: &str,
    lang: Lang,
    call: Node<'t>,
) -> Option<ToolCall<'t>> {
    let args = grammar.child(call, "arguments")?;
    let mut cursor = args.walk();
    let items: Vec<Node<'t>> = args
        .named_children(&mut cursor)
        .filter(|c| !c.is_extra())
        .collect();
    let keyword = |name: &str| {
        items
            .iter()
            .find(|item| {
                grammar.kind(**item) == "keyword_argument"
                    && grammar
                        .child(**item, "name")
                        .is_some_and(|n| &code[n.byte_range()] == name)
            })
            .and_then(|item| grammar.child(*item, "value"))
    };
    let first = items
        .first()
        .copied()
        .filter(|item| grammar.kind(*item) != "keyword_argument");
    let Some(first) = first else {
        // Python keywords only: `session.call_tool(name="get_weather", arguments={...})`
        let literal = keyword("name")?;
        return Some(ToolCall {
            tool: string_literal(grammar, code, lang, literal)?,
            name_literal: Some(literal),
            arguments: keyword("arguments").map_or(ToolArguments::Empty, ToolArguments::Node),
        });
    };
    if let Some(tool) = string_literal(grammar, code, lang, first) {
        return Some(ToolCall {
            tool,
            name_literal: Some(first),
            arguments: keyword("arguments").map_or(ToolArguments::AfterName, ToolArguments::Node),
        });
    }
    if !matches!(grammar.kind(first), "object" | "dictionary") {
        return None;
    }
    let mut named = None;
    let mut arguments = ToolArguments::Empty;
    let mut pairs = first.walk();
    for pair in first.named_children(&mut pairs) {
        if grammar.kind(pair) != "pair" {
            continue;
        }
        let (Some(key), Some(value)) = (grammar.child(pair, "key"), grammar.child(pair, "value"))
        else {
            continue;
        };
        let key = string_literal(grammar, code, lang, key)
            .unwrap_or_else(|| code[key.byte_range()].to_owned());
        match key.as_str() {
            "name" => named = string_literal(grammar, code, lang, value).map(|t| (t, value)),
            "arguments" => arguments = ToolArguments::Node(value),
            _ => {}
        }
    }
    let (tool, literal) = named?;
    Some(ToolCall {
        tool,
        name_literal: Some(literal),
        arguments,
    })
}

pub struct TreeResult {
    pub params: Vec<RawParam>,
    pub tool_calls: Vec<String>,
}

struct Frame<'t> {
    node: Node<'t>,
    /// `node.kind()`, cached.
    kind: &'static str,
    /// The node's field in its parent; only kept for arrays (`context_name` looks through
    /// them to the field they fill) and `JOIN_KINDS`, `None` otherwise.
    field: Option<&'static str>,
    /// This node's index among its parent's named, non-comment children.
    named_index: usize,
    named_seen: usize,
    /// Segment starts of a node whose children are reordered (object keys, keyword args).
    sorted: Option<Vec<(usize, bool)>>,
    /// Where a `;` child was written, while it is the last child seen: a statement's final
    /// semicolon is optional formatting in JS (ASI) and Python, so it is dropped on exit.
    trailing_semicolon: Option<usize>,
    /// `joined_by` of this node in its parent, computed on entry (the frames it reads lie
    /// below this one and do not change while it is entered).
    joined: bool,
    /// Where `joined_position`'s climb from this node ends: the level, field and index of
    /// the outermost value it is a piece of, itself when it is none. Kept per frame, a
    /// literal's climb costs one step, not one per level of the chain it sits in (`1 + 1 +
    /// ...` a thousand deep: docs/normalization.md, Cost).
    joined_top: (usize, Option<&'static str>, usize),
}

/// The literals a variable was last assigned (`Walker::assigned_literals`): the assignment's
/// start byte, and the indexes in `params` of its pieces, those of a list's items by the
/// item's index (`parts = ["a", "b"]`), so that `parts[1]` given as a credential flags "b"
/// alone; and how many items that list holds (0: no list), so that one given as a JDBC
/// `[user, password]` pair (`Walker::jdbc_driver_args`) flags its second item alone.
#[derive(Default)]
struct Assigned {
    at: usize,
    any: Vec<usize>,
    items: HashMap<usize, Vec<usize>>,
    list_len: usize,
}

struct Walker<'a, 't> {
    code: &'a str,
    lang: Lang,
    /// Kind and field names by id (tree-sitter's string lookups dominate the walk otherwise).
    grammar: &'static Grammar,
    /// One cursor reused for child scans: each `node.walk()` allocates a new one.
    scratch: TreeCursor<'t>,
    canon: &'a mut Canonical,
    /// Names the snippet binds, gathered during the walk; resolved after it.
    bound: HashSet<&'a str>,
    pending: Vec<Node<'t>>,
    params: Vec<RawParam>,
    /// Parameters taken so far (`params` also lists secrets past the cap).
    param_count: usize,
    tool_calls: Vec<String>,
    /// Start bytes of string literals that are code, not parameters (tool and module names).
    code_literals: HashSet<usize>,
    /// Variables assigned a parameter literal, or a value joined of literals and interpolated
    /// strings' text (`pw = "a" + x`, `pw = f"{p}a"`), by name (scopes ignored): the latest
    /// assignment's start byte and its pieces' indexes in `params`.
    assigned_literals: HashMap<&'a str, Assigned>,
    frames: Vec<Frame<'t>>,
    /// The frame index of an interpolated string that is a credential's value, while inside
    /// it: its literal text is a secret (docs/normalization.md, Secrets). Also set for one
    /// assigned to a variable, with `string_variable`.
    credential_string: Option<usize>,
    /// The variable (and its assignment's start byte) the string `credential_string` marks is
    /// assigned to, when only a later use of the variable may make its text a credential's:
    /// its fragments are listed unflagged, and dropped after the walk if none was.
    string_variable: Option<(&'a str, usize)>,
    /// `joined_strings` of each joined value read so far, by node id.
    url_pieces: HashMap<usize, Option<Vec<Node<'t>>>>,
    /// Which items of a list read as an argv hold a credential (`argv_item_secret`), by the
    /// list's start byte: read once per list.
    argv_items: HashMap<usize, Vec<bool>>,
    /// The snippet names `jaydebeapi` (`import jaydebeapi as jdb`, `from jaydebeapi import
    /// connect`): its `connect` calls are jaydebeapi's (`jdbc_password_item`).
    names_jaydebeapi: bool,
}

pub fn walk<'a>(
    tree: &Tree,
    code: &'a str,
    lang: Lang,
    canon: &'a mut Canonical,
    max_depth: usize,
) -> Result<TreeResult, WalkError> {
    let mut walker = Walker {
        code,
        lang,
        grammar: lang.tables(),
        scratch: tree.walk(),
        canon,
        bound: HashSet::new(),
        pending: Vec::new(),
        params: Vec::new(),
        param_count: 0,
        tool_calls: Vec::new(),
        code_literals: HashSet::new(),
        assigned_literals: HashMap::new(),
        frames: Vec::new(),
        credential_string: None,
        string_variable: None,
        url_pieces: HashMap::new(),
        argv_items: HashMap::new(),
        names_jaydebeapi: code.contains(secrets::JDBC_DRIVER_MODULE),
    };
    let mut cursor = tree.walk();
    'outer: loop {
        let node = cursor.node();
        if walker.enter(node, &cursor)? {
            if walker.frames.len() > max_depth {
                return Err(WalkError::TooDeep);
            }
            if cursor.goto_first_child() {
                continue;
            }
            walker.exit();
        }
        loop {
            if cursor.goto_next_sibling() {
                continue 'outer;
            }
            if !cursor.goto_parent() {
                break 'outer;
            }
            walker.exit();
        }
    }
    while !walker.frames.is_empty() {
        walker.exit();
    }
    walker.canon.resolve_names(&walker.bound);
    // The text of an interpolated string assigned to a variable never given as a credential.
    walker.params.retain(|p| !p.fragment || p.named_credential);
    Ok(TreeResult {
        params: walker.params,
        tool_calls: walker.tool_calls,
    })
}

// Work counters for the cost tests (`normalize/tests.rs`): `joined_by` calls and nodes
// visited by `joined_strings`, on this thread.
#[cfg(test)]
thread_local! {
    pub(crate) static JOINED_BY_CALLS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    pub(crate) static JOINED_NODES_VISITED: std::cell::Cell<usize> =
        const { std::cell::Cell::new(0) };
}

#[cfg(test)]
fn count(counter: &'static std::thread::LocalKey<std::cell::Cell<usize>>) {
    counter.with(|c| c.set(c.get() + 1));
}

/// The string literals of a joined value (`Walker::url_password_piece`) in the order written,
/// not looking into strings; `None` past `URL_PIECES` of them or `16 * URL_PIECES` nodes.
fn joined_strings<'t>(grammar: &Grammar, root: Node<'t>) -> Option<Vec<Node<'t>>> {
    const URL_PIECES: usize = 64;
    let mut strings: Vec<Node<'t>> = Vec::new();
    let mut cursor = root.walk();
    let mut visited = 0usize;
    loop {
        let node = cursor.node();
        visited += 1;
        #[cfg(test)]
        count(&JOINED_NODES_VISITED);
        let is_string = grammar.kind(node) == "string";
        if is_string {
            strings.push(node);
        }
        if strings.len() > URL_PIECES || visited > 16 * URL_PIECES {
            return None;
        }
        if !is_string && cursor.goto_first_child() {
            continue;
        }
        while !cursor.goto_next_sibling() {
            if !cursor.goto_parent() || cursor.node() == root {
                return Some(strings);
            }
        }
    }
}

/// Whether a piece of a string's literal text holds a credential by the value rules a plain
/// string's value is read by (`RawParam::is_secret`).
fn holds_a_secret(text: &str) -> bool {
    secrets::is_secret_value(text) || super::fallback::holds_shell_secret(text)
}

enum Candidate {
    Str,
    Num { negative: bool },
}

impl<'a, 't> Walker<'a, 't> {
    fn text(&self, node: Node<'_>) -> &'a str {
        &self.code[node.byte_range()]
    }

    /// Handle entering `node`; `true` when its children must be walked (a frame was pushed).
    /// `cursor` is on `node`; its field name is read only where it matters (literals,
    /// identifiers, arrays): the lookup walks the cursor's stack and is not free.
    fn enter(&mut self, node: Node<'t>, cursor: &TreeCursor<'t>) -> Result<bool, WalkError> {
        if node.is_extra() {
            return Ok(false); // comments (and Python line continuations) never count
        }
        let kind = self.grammar.kind(node);
        let mut sites = bindings::Sites {
            grammar: self.grammar,
            cursor: &mut self.scratch,
            out: &mut self.pending,
        };
        if self.lang.is_python() {
            sites.python(node, kind);
        } else {
            sites.js(node, kind);
        }
        while let Some(pattern) = sites.out.pop() {
            sites.collect_pattern(pattern, self.code, &mut self.bound);
        }
        let mut named_index = 0;
        let position = self.canon.position();
        if let Some(parent) = self.frames.last_mut() {
            parent.trailing_semicolon = (kind == ";" && !node.is_named()).then_some(position);
            if node.is_named() {
                named_index = parent.named_seen;
                parent.named_seen += 1;
            }
            if let Some(segments) = parent.sorted.as_mut() {
                if !node.is_named() {
                    return Ok(false); // braces and commas of a reordered node
                }
                let sortable = parent.kind != "argument_list" || kind == "keyword_argument";
                segments.push((self.canon.position(), sortable));
            }
        }
        if let Some(candidate) = self.candidate(node, kind) {
            let field = self.grammar.field_name(cursor);
            self.literal(node, field, named_index, candidate);
            return Ok(false);
        }
        if self
            .credential_string
            .is_some_and(|at| at + 1 == self.frames.len())
        {
            self.credential_fragment(node, kind);
        } else if self
            .frames
            .last()
            .is_some_and(|f| matches!(f.kind, "string" | "template_string"))
        {
            // A piece of an interpolated string no credential's position makes one.
            self.secret_fragment(node, kind);
        } else if matches!(kind, "string" | "template_string") && self.credential_string.is_none() {
            // Not a candidate, so interpolated: `f"{prefix}..."`, `${prefix}...`.
            let field = self.grammar.field_name(cursor);
            if self.is_credential_value(field, named_index) {
                self.credential_string = Some(self.frames.len());
            } else if let Some(variable) = self.assigned_variable(field, named_index) {
                // `pw = f"{p}..."`: a secret if `pw` is given as a credential later.
                self.credential_string = Some(self.frames.len());
                self.string_variable = Some(variable);
            }
        }
        match kind {
            "identifier" => {
                let field = self.grammar.field_name(cursor);
                self.identifier(node, field, named_index);
                return Ok(false);
            }
            "shorthand_property_identifier" | "shorthand_property_identifier_pattern" => {
                // `{path}` is `{path: path}`: the key stays, the variable may be renamed.
                let name = self.text(node);
                self.canon.token(name.as_bytes());
                self.canon.token(b":");
                self.variable(name, true);
                return Ok(false);
            }
            "expression_statement" if self.lang.is_python() && self.is_docstring(node) => {
                return Ok(false); // a docstring is documentation, like a comment
            }
            "call_expression" | "call" => self.call(node),
            _ => {}
        }
        if node.child_count() == 0 {
            let text = self.text(node);
            self.canon.token(text.as_bytes());
            return Ok(false);
        }
        let sorted = self.reorders_children(node, kind).then(Vec::new);
        self.canon.tagged(canonical::TAG_OPEN, kind.as_bytes());
        let field = (ARRAY_KINDS.contains(&kind)
            || MAP_KINDS.contains(&kind)
            || JOIN_KINDS.contains(&kind))
        .then(|| self.grammar.field_name(cursor))
        .flatten();
        let level = self.frames.len();
        let joined = level > 0 && self.joined_by(level, field, named_index);
        let joined_top = if joined {
            self.frames[level - 1].joined_top
        } else {
            (level, field, named_index)
        };
        self.frames.push(Frame {
            node,
            kind,
            field,
            named_index,
            named_seen: 0,
            sorted,
            trailing_semicolon: None,
            joined,
            joined_top,
        });
        Ok(true)
    }

    fn exit(&mut self) {
        if let Some(frame) = self.frames.pop() {
            if self.credential_string == Some(self.frames.len()) {
                self.credential_string = None;
                self.string_variable = None;
            }
            if let Some(at) = frame.trailing_semicolon {
                self.canon.truncate(at);
            }
            if let Some(segments) = frame.sorted {
                self.canon.sort_segments(&segments);
            }
            self.canon.marker(canonical::TAG_CLOSE);
        }
    }

    /// Object literals passed as call arguments (and objects nested in them) hash with
    /// sorted keys; Python keyword arguments hash in sorted order after the positional ones.
    fn reorders_children(&mut self, node: Node<'t>, kind: &str) -> bool {
        let grammar = self.grammar;
        let mut has_child_kind = |kinds: &[&str]| {
            let found = node
                .named_children(&mut self.scratch)
                .any(|c| kinds.contains(&grammar.kind(c)));
            found
        };
        match kind {
            "argument_list" => !has_child_kind(&["list_splat", "dictionary_splat"]),
            "object" | "dictionary" => {
                let n = self.frames.len();
                let in_argument_position = match self.frames.last() {
                    Some(parent) => match parent.kind {
                        "arguments" | "argument_list" => true,
                        "keyword_argument" => true,
                        "pair" => n >= 2 && self.frames[n - 2].sorted.is_some(),
                        _ => false,
                    },
                    None => false,
                };
                in_argument_position && !has_child_kind(&["spread_element", "dictionary_splat"])
            }
            _ => false,
        }
    }

    fn candidate(&mut self, node: Node<'t>, kind: &str) -> Option<Candidate> {
        let python = self.lang.is_python();
        match kind {
            // An f-string with interpolations is code with expressions inside: walk into it.
            "string" if python && self.has_child_kind(node, "interpolation") => None,
            "string" => Some(Candidate::Str),
            "template_string" if !python => {
                (!self.has_child_kind(node, "template_substitution")).then_some(Candidate::Str)
            }
            "number" if !python => Some(Candidate::Num { negative: false }),
            "integer" | "float" if python => Some(Candidate::Num { negative: false }),
            "unary_expression" | "unary_operator" => {
                let operator = self.grammar.child(node, "operator")?;
                let argument = self.grammar.child(node, "argument")?;
                let numeric = matches!(self.grammar.kind(argument), "number" | "integer" | "float");
                (self.grammar.kind(operator) == "-" && numeric)
                    .then_some(Candidate::Num { negative: true })
            }
            _ => None,
        }
    }

    /// Whether a literal in this position is code: object keys, subscripts, module and tool
    /// names, type literals, `case` labels and JS directives.
    fn literal_is_code(&self, node: Node<'t>, field: Option<&'static str>) -> bool {
        if self.code_literals.contains(&node.start_byte()) {
            return true;
        }
        let Some(parent) = self.frames.last() else {
            return false;
        };
        matches!(
            (parent.kind, field),
            ("pair", Some("key"))
                | ("subscript_expression", Some("index"))
                | ("subscript", Some("subscript"))
                | ("import_statement" | "export_statement", _)
                | (
                    "literal_type" | "switch_case" | "case_pattern" | "expression_statement",
                    _
                )
                | (
                    "import_specifier" | "export_specifier" | "import_require_clause",
                    _
                )
        )
    }

    fn literal(
        &mut self,
        node: Node<'t>,
        field: Option<&'static str>,
        named_index: usize,
        candidate: Candidate,
    ) {
        let text = self.text(node);
        let is_code = self.literal_is_code(node, field);
        let decoded = if is_code {
            None
        } else {
            match candidate {
                Candidate::Str => {
                    let value = if self.lang.is_python() {
                        literal::decode_py_string(text)
                    } else {
                        literal::decode_js_string(text)
                    };
                    value.map(|s| (JsonType::String, Some(s)))
                }
                Candidate::Num { negative } => {
                    let digits = if negative {
                        self.grammar.child(node, "argument").map(|a| self.text(a))
                    } else {
                        Some(text)
                    };
                    digits
                        .and_then(|d| literal::parse_number(d, negative, self.lang.is_python()))
                        .map(|(json_type, value)| (json_type, Some(value)))
                }
            }
        };
        let Some((json_type, Some(value))) = decoded else {
            self.code_literal(text, &candidate);
            if !is_code {
                // What cannot be decoded exactly (a byte string, `\N{...}`, BigInt) stays code,
                // but a credential must not stay in the code (docs/normalization.md, Secrets).
                let json_type = match candidate {
                    Candidate::Str => JsonType::String,
                    Candidate::Num { .. } => JsonType::Integer,
                };
                let raw = self.code_param(node.byte_range(), json_type, field, named_index);
                if raw.is_secret() {
                    self.params.push(raw);
                }
            }
            return;
        };
        let overflow = self.param_count >= MAX_PARAMS;
        if overflow {
            // Past the cap the literal is code, hashed by value: listed only if it is a secret.
            self.code_literal(text, &candidate);
        } else {
            self.param_count += 1;
            self.canon.marker(match json_type {
                JsonType::String => canonical::TAG_STRING_PARAM,
                _ => canonical::TAG_NUMBER_PARAM,
            });
        }
        let context = self.context_name(field, named_index);
        let (value_json, string_value) = match json_type {
            JsonType::String => (
                serde_json::to_string(&value).unwrap_or_default(),
                Some(value),
            ),
            _ => (value, None),
        };
        let named_credential =
            self.credential_position(field, named_index, string_value.as_deref())
                || self.url_password_piece(field, named_index, node);
        let raw = RawParam {
            start: node.start_byte(),
            end: node.end_byte(),
            json_type,
            value_json,
            string_value,
            context,
            overflow,
            named_credential,
            fragment: false,
        };
        if !overflow || raw.is_secret() {
            // a piece holding no secret (`pw = "".join([...])`) stays when `pw` is given as
            // a credential, as it does given in place
            let no_secret = self.joined_position(field, named_index).is_some()
                && raw
                    .string_value
                    .as_deref()
                    .is_some_and(super::holds_no_secret);
            if let Some(variable) = self.assigned_variable(field, named_index) {
                if !no_secret {
                    let item = self.assigned_item(field, named_index);
                    self.remember_assigned(variable, item, self.params.len());
                }
            }
            self.params.push(raw);
        }
    }

    /// Whether this position names a value as a credential without its context name doing
    /// so (`RawParam::named_credential`): a sibling names it (`named_credential`), or it is a
    /// piece of a value joined of pieces (`joined_position`: `"..." + x`, `("..." "...")`, `a
    /// if c else "..."`) given where its own would be a credential's; a piece holding no
    /// secret (`super::holds_no_secret`: `"Bearer " + token`, `user + ":" + pw`) stays.
    fn credential_position(
        &mut self,
        field: Option<&'static str>,
        named_index: usize,
        value: Option<&str>,
    ) -> bool {
        if self.named_credential(field, named_index) {
            return true;
        }
        let Some((level, field, index)) = self.joined_position(field, named_index) else {
            return false;
        };
        !value.is_some_and(super::holds_no_secret)
            && (self
                .context_name_at(level, field, index)
                .and_then(|context| naming::upper_snake(&context))
                .is_some_and(|context| secrets::is_secret_name(&context))
                || self.named_credential_at(level, field, index))
    }

    /// Whether a string literal is joined into a URL where its password goes, in a value
    /// joined from pieces (`joined_by`): after a piece that opens the URL's authority up to
    /// its password and before one that closes it with `@` (`"pg://bob:" + "..." + "@db"`,
    /// `["pg://bob:", "...", "@db"].join("")`), or as an argument of a format string whose
    /// URL has a format field for a password (`"pg://bob:%s@db" % "..."`,
    /// `"pg://bob:{}@db".format("...")`: every literal argument, erring towards the secret).
    /// Reads at most `URL_PIECES` string literals of the joined value, once per value
    /// (`url_pieces`): every literal of a long chain reads the same list.
    fn url_password_piece(
        &mut self,
        field: Option<&'static str>,
        named_index: usize,
        literal: Node<'t>,
    ) -> bool {
        if self.grammar.kind(literal) != "string" {
            return false; // a number or a template string is never among the pieces read
        }
        let Some((level, _, _)) = self.joined_position(field, named_index) else {
            return false;
        };
        let Some(root) = self.frames.get(level).map(|f| f.node) else {
            return false;
        };
        if !self.url_pieces.contains_key(&root.id()) {
            let strings = joined_strings(self.grammar, root);
            self.url_pieces.insert(root.id(), strings);
        }
        let Some(Some(strings)) = self.url_pieces.get(&root.id()) else {
            return false;
        };
        let decode = |n: Node<'t>| {
            let text = self.text(n);
            if self.lang.is_python() {
                literal::decode_py_string(text)
            } else {
                literal::decode_js_string(text)
            }
        };
        let Some(at) = strings
            .iter()
            .position(|s| s.start_byte() == literal.start_byte())
        else {
            return false;
        };
        let Some(text) = decode(literal) else {
            return false;
        };
        if text.contains("://") {
            return false;
        }
        let before = at.checked_sub(1).and_then(|i| decode(strings[i]));
        let after = strings.get(at + 1).and_then(|&n| decode(n));
        let closes = |next: &str| {
            next.bytes()
                .find(|b| matches!(b, b'@' | b'/' | b'?' | b'#') || b.is_ascii_whitespace())
                == Some(b'@')
        };
        let joined_between = before.as_deref().is_some_and(secrets::opens_a_url_password)
            && !text.contains(['@', '/'])
            && after.as_deref().is_some_and(closes);
        let formatting = match self.grammar.kind(root) {
            "binary_operator" | "binary_expression" => self
                .grammar
                .child(root, "operator")
                .is_some_and(|op| self.grammar.kind(op) == "%"),
            "call" | "call_expression" => self.format_call(root),
            _ => false,
        };
        joined_between
            || (formatting
                && strings[..at]
                    .iter()
                    .filter_map(|&s| decode(s))
                    .any(|s| secrets::formats_a_url_password(&s)))
    }

    /// Whether the child of `frames[level - 1]` at `field` / `named_index` is a piece of its
    /// value: any child of a parenthesized expression or of Python's implicit join (`"a"
    /// "b"`), the expression of an interpolation (`f"{pw}..."`, `` `${pw}...` ``), an operand
    /// of `+`, a branch (not the condition) of a conditional, the format
    /// string and arguments of Python's `%` formatting, and the string, callee, arguments and
    /// joined items of a formatting call (`format_call`: `"...".format(x)`, `"".join([...])`,
    /// `"...".concat(x)`, `[...].join("")`, `` String.raw`...` ``), the receiver of a
    /// text method (`text_call`: `pw.strip()`, `pw.trim()`, `pw.slice(0, 8)`), and the value
    /// subscripted or sliced (`pw[:8]`, `pw[0]`).
    fn joined_by(&self, level: usize, field: Option<&'static str>, named_index: usize) -> bool {
        #[cfg(test)]
        count(&JOINED_BY_CALLS);
        let frame = &self.frames[level - 1];
        let grammar = self.grammar;
        let format_call = |at: usize| {
            at.checked_sub(1)
                .and_then(|at| self.frames.get(at))
                .is_some_and(|call| self.format_call(call.node))
        };
        let text_call = |at: usize| {
            at.checked_sub(1)
                .and_then(|at| self.frames.get(at))
                .is_some_and(|call| self.format_call(call.node) || self.text_call(call.node))
        };
        match frame.kind {
            "parenthesized_expression" | "concatenated_string" => true,
            // an interpolated string is made of its text and its interpolations' values
            "string" | "template_string" | "interpolation" | "template_substitution" => true,
            "binary_expression" | "binary_operator" => grammar
                .child(frame.node, "operator")
                .is_some_and(|op| match grammar.kind(op) {
                    "+" => true,
                    // `"...%s" % x`, `fmt % x`: only a string (or a variable, which may
                    // hold one) formats; `n % 7` of numbers is arithmetic
                    "%" => grammar.child(frame.node, "left").is_some_and(|left| {
                        matches!(
                            grammar.kind(left),
                            "string" | "concatenated_string" | "identifier"
                        )
                    }),
                    _ => false,
                }),
            "ternary_expression" => matches!(field, Some("consequence" | "alternative")),
            // a subscript or slice of a value is a piece of it (`pw[:8]`, `pw[0]`); its index
            // is not
            "subscript" => field == Some("value"),
            "subscript_expression" => field == Some("object"),
            // `a if c else b`: no fields; the condition is the second named child
            "conditional_expression" => named_index != 1,
            "call" | "call_expression" => match field {
                Some("function") => self.format_call(frame.node) || self.text_call(frame.node),
                Some("arguments") => self.format_call(frame.node) || self.encoding_call(frame.node),
                _ => false,
            },
            // the receiver of a text method; a value whose property is read (`{k: "..."}.k`,
            // `{a: {b: "..."}}.a.b`), not the receiver of any other method
            "attribute" | "member_expression" => {
                field == Some("object")
                    && if frame.field == Some("function") {
                        text_call(level - 1)
                    } else {
                        true
                    }
            }
            // the first argument of an encoding call (`b64encode(f"{u}:{pw}".encode())`)
            "argument_list" | "arguments" => {
                format_call(level - 1)
                    || (named_index == 0
                        && level >= 2
                        && self.encoding_call(self.frames[level - 2].node))
            }
            "keyword_argument" => {
                field == Some("value")
                    && level >= 2
                    && matches!(self.frames[level - 2].kind, "argument_list")
                    && format_call(level - 2)
            }
            // the items of an array that is itself a piece of a formatting call or of `%`:
            // `"".join(["...", x])`, `["...", x].join("")`, `"%s%s" % ("...", x)`; the items
            // and values of a list or a map read where it stands (`["...", x][0]`, `{"k":
            // "..."}["k"]`, `{k: "..."}.k`): whichever the read gives is a piece; and those
            // of one interpolated whole, whose text is theirs (`f"{['...']}"`); and so on for
            // one nested in such a list or map (`{"k": {"j": "..."}}["k"]["j"]`)
            kind if ARRAY_KINDS.contains(&kind) || MAP_KINDS.contains(&kind) => {
                level >= 2
                    && (ARRAY_KINDS.contains(&kind)
                        && matches!(
                            self.frames[level - 2].kind,
                            "argument_list" | "arguments" | "member_expression" | "binary_operator"
                        )
                        || matches!(
                            self.frames[level - 2].kind,
                            "subscript"
                                | "subscript_expression"
                                | "attribute"
                                | "member_expression"
                                | "interpolation"
                                | "template_substitution"
                                | "pair"
                        )
                        || CONTAINER_KINDS.contains(&self.frames[level - 2].kind))
                    && frame.joined
            }
            "pair" => {
                field == Some("value")
                    && level >= 2
                    && MAP_KINDS.contains(&self.frames[level - 2].kind)
                    && frame.joined
            }
            _ => false,
        }
    }

    /// A call's callee name and its receiver: `f` of `f(...)` (none), `m` and `o` of
    /// `o.m(...)` (Python's attribute, JS's member expression); None for any other callee.
    fn callee(&self, call: Node<'t>) -> Option<(Node<'t>, Option<Node<'t>>)> {
        let grammar = self.grammar;
        let function = grammar.child(call, "function")?;
        let (name, receiver) = match grammar.kind(function) {
            "identifier" => return Some((function, None)),
            "attribute" => ("attribute", "object"),
            "member_expression" => ("property", "object"),
            _ => return None,
        };
        Some((
            grammar.child(function, name)?,
            grammar.child(function, receiver),
        ))
    }

    /// Whether `call` builds a string of its receiver and arguments: Python's
    /// `"...".format(...)`, `"sep".join(...)` and `"...".replace(...)` on a string, JS's
    /// `"...".concat(...)` and `"...".replace(...)` on a string, `[...].join(...)` on an array
    /// and `` String.raw`...` ``; each also on a variable, which may hold the string or the
    /// array (`fmt.format(x)`, `f.concat(x)`, `parts.join("")`; a `join` of one argument at most,
    /// not `path.join(dir, "a.json")`). Constant cost.
    fn format_call(&self, call: Node<'t>) -> bool {
        let grammar = self.grammar;
        let Some((method, Some(object))) = self.callee(call) else {
            return false;
        };
        let object_kind = grammar.kind(object);
        let variable = object_kind == "identifier";
        let string = variable
            || matches!(
                object_kind,
                "string" | "concatenated_string" | "template_string"
            );
        let one_argument = || {
            grammar
                .child(call, "arguments")
                .is_some_and(|args| args.named_child_count() <= 1)
        };
        match (self.text(method), self.lang.is_python()) {
            ("format" | "replace", true) | ("concat" | "replace", false) => string,
            ("join", true) => string && (!variable || one_argument()),
            ("join", false) => object_kind == "array" || (variable && one_argument()),
            ("raw", false) => variable && self.text(object) == "String",
            _ => false,
        }
    }

    /// Whether `call` encodes its first argument into the value it returns, so that a
    /// credential given so is the argument's (`str(pw)`, `bytes(pw, "utf-8")`,
    /// `base64.b64encode(...)`, `btoa(...)`, `Buffer.from(...)`, `encodeURIComponent(...)`):
    /// its first argument is a piece of its value, the others are not. Constant cost.
    fn encoding_call(&self, call: Node<'t>) -> bool {
        let grammar = self.grammar;
        let Some(function) = grammar.child(call, "function") else {
            return false;
        };
        match grammar.kind(function) {
            "identifier" => matches!(
                self.text(function),
                "str" | "bytes" | "btoa" | "encodeURIComponent"
            ),
            "attribute" | "member_expression" => {
                let field = if grammar.kind(function) == "attribute" {
                    "attribute"
                } else {
                    "property"
                };
                let method = grammar.child(function, field).map(|m| self.text(m));
                let object = grammar.child(function, "object").map(|o| self.text(o));
                matches!(
                    method,
                    Some("b64encode" | "urlsafe_b64encode" | "standard_b64encode")
                ) || (method == Some("from") && object == Some("Buffer"))
            }
            _ => false,
        }
    }

    /// Whether `call` reads an environment variable with a default, its second argument
    /// (`secrets::ENV_LOOKUPS`: `os.getenv("K", "...")`, `os.environ.get("K", "...")`).
    /// Constant cost.
    fn env_lookup(&self, call: Node<'t>) -> bool {
        let Some((method, object)) = self.callee(call) else {
            return false;
        };
        let method = self.text(method);
        // the receiver's last name (`environ` of `os.environ`)
        let receiver = object.map(|o| {
            let text = self.text(o);
            text.rsplit('.').next().unwrap_or(text)
        });
        secrets::ENV_LOOKUPS
            .iter()
            .any(|&(on, name)| name == method && on.map_or(true, |on| receiver == Some(on)))
    }

    /// Whether `call` returns its receiver's text changed only in case, ends or encoding, or a
    /// part of it (`pw.strip()`, `pw.encode("utf-8")`, `pw.trim()`, `pw.slice(0, 8)`): its
    /// receiver is a piece of its value, its arguments are not. Constant cost.
    fn text_call(&self, call: Node<'t>) -> bool {
        let Some((method, Some(_))) = self.callee(call) else {
            return false;
        };
        let python_methods: &[&str] = &[
            "strip", "lstrip", "rstrip", "lower", "upper", "encode", "decode",
        ];
        let js_methods: &[&str] = &[
            "trim",
            "trimStart",
            "trimEnd",
            "toLowerCase",
            "toUpperCase",
            "toString",
            "slice",
            "substring",
            "substr",
            "charAt",
            "at",
        ];
        let methods = if self.lang.is_python() {
            python_methods
        } else {
            js_methods
        };
        methods.contains(&self.text(method))
    }

    /// The position of the outermost value a child in this position is a piece of
    /// (`joined_by`): the frame level its parent is at (`frames[level - 1]`), its field and
    /// its index there. None when the child is no piece.
    fn joined_position(
        &self,
        field: Option<&'static str>,
        named_index: usize,
    ) -> Option<(usize, Option<&'static str>, usize)> {
        let level = self.frames.len();
        (level > 0 && self.joined_by(level, field, named_index))
            .then(|| self.frames[level - 1].joined_top)
    }

    /// List `self.params[index]` as a piece of what `variable` was last assigned, the item
    /// of a list at `item` when it is one (`assigned_item`).
    fn remember_assigned(
        &mut self,
        (variable, at): (&'a str, usize),
        item: Option<usize>,
        index: usize,
    ) {
        // the list's items are counted once per assignment (`assigned_item`: the list is the
        // innermost frame)
        let counted = self
            .assigned_literals
            .get(variable)
            .is_some_and(|pieces| pieces.at == at && pieces.list_len > 0);
        let list_len = match (item, self.frames.last()) {
            (Some(_), Some(list)) if !counted => self.items_of(list.node),
            _ => 0,
        };
        let pieces = self.assigned_literals.entry(variable).or_default();
        if pieces.at != at {
            *pieces = Assigned {
                at,
                ..Assigned::default()
            };
        }
        pieces.list_len = pieces.list_len.max(list_len);
        match item {
            Some(item) => pieces.items.entry(item).or_default().push(index),
            None => pieces.any.push(index),
        }
    }

    /// The index of the item a literal in this position is of a list assigned whole to a
    /// variable (`parts = ["...", x]`: 0), which a subscript by that index reads alone
    /// (`parts[0]`); None for any other piece.
    fn assigned_item(&self, field: Option<&'static str>, named_index: usize) -> Option<usize> {
        let n = self.frames.len();
        let list = self.frames.get(n.checked_sub(1)?)?;
        let assignment = self.frames.get(n.checked_sub(2)?)?;
        let whole = matches!(
            (assignment.kind, list.field),
            ("variable_declarator", Some("value"))
                | ("assignment_expression" | "assignment", Some("right"))
        );
        (ARRAY_KINDS.contains(&list.kind)
            && whole
            && field.is_none()
            && self.joined_position(field, named_index).is_none())
        .then_some(named_index)
    }

    /// The item a variable in this position is read at, when a subscript reads it by a
    /// literal index (`parts[1]`); None for any other read, which may take any item
    /// (`parts[i]`, `parts[-1]`, `parts`, `"".join(parts)`).
    fn read_item(&self, field: Option<&'static str>) -> Option<usize> {
        let parent = self.frames.last()?;
        let index = match (parent.kind, field) {
            ("subscript", Some("value")) => self.grammar.child(parent.node, "subscript"),
            ("subscript_expression", Some("object")) => self.grammar.child(parent.node, "index"),
            _ => None,
        }?;
        let digits = self.text(index);
        (matches!(self.grammar.kind(index), "integer" | "number")
            && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
    }

    /// A value at `span` in this position that stays code, without a value of its own: listed
    /// only when `RawParam::is_secret` says its position makes it a credential's (its context
    /// name or `named_credential`), so that it is redacted (docs/normalization.md, Secrets).
    fn code_param(
        &mut self,
        span: std::ops::Range<usize>,
        json_type: JsonType,
        field: Option<&'static str>,
        named_index: usize,
    ) -> RawParam {
        RawParam {
            start: span.start,
            end: span.end,
            json_type,
            value_json: String::new(),
            string_value: None,
            context: self.context_name(field, named_index),
            overflow: true,
            named_credential: self.credential_position(field, named_index, None),
            fragment: false,
        }
    }

    /// Whether a value in this position is a credential's by the rule a literal's is
    /// (`code_param`).
    fn is_credential_value(&mut self, field: Option<&'static str>, named_index: usize) -> bool {
        self.code_param(0..0, JsonType::String, field, named_index)
            .is_secret()
    }

    /// A child of an interpolated string that is a credential's value: its literal text
    /// (adjacent pieces as one) is listed as a secret fragment, so the template and the
    /// redacted code write `f"{prefix}[REDACTED]"`; the interpolations stay code, so the
    /// stored code keeps its data flow (docs/normalization.md, Secrets). The text is still
    /// hashed as code, so the string hashes as it did before.
    fn credential_fragment(&mut self, node: Node<'t>, kind: &str) {
        if !matches!(
            kind,
            "string_content" | "string_fragment" | "escape_sequence"
        ) {
            return;
        }
        if let Some(last) = self.params.last_mut() {
            if last.fragment && last.end == node.start_byte() {
                last.end = node.end_byte();
                return;
            }
        }
        if let Some(variable) = self.string_variable {
            self.remember_assigned(variable, None, self.params.len());
        }
        let holds_one = holds_a_secret(self.text(node));
        self.params.push(RawParam::fragment(
            node,
            self.string_variable.is_none() || holds_one,
        ));
    }

    /// A piece of literal text of an interpolated string in no credential's position that
    /// holds a credential by the value rules a plain string is read by (`sql`... password=pw
    /// ${x}``, `` `${u} token: "ghp_..."` ``, `f"{h} -p pw"`): listed as a secret fragment, so
    /// the template and the redacted code write `[REDACTED]` for that piece, as a plain string
    /// holding one is `"[REDACTED]"` whole; the interpolations stay code
    /// (docs/normalization.md, Secrets).
    fn secret_fragment(&mut self, node: Node<'t>, kind: &str) {
        if !matches!(kind, "string_content" | "string_fragment") {
            return;
        }
        if !holds_a_secret(self.text(node)) {
            return;
        }
        self.params.push(RawParam::fragment(node, true));
    }

    /// The variable a literal is assigned to, whole or as a piece (`joined_position`: `const
    /// pw = "..."`, `pw = "..." + x`) or an item of a list (`parts = ["...", x]`, which a
    /// formatting call may join: `"".join(parts)`), and the assignment's start byte.
    fn assigned_variable(
        &self,
        field: Option<&'static str>,
        named_index: usize,
    ) -> Option<(&'a str, usize)> {
        let (mut level, mut field) = match self.joined_position(field, named_index) {
            Some((level, field, _)) => (level, field),
            None => (self.frames.len(), field),
        };
        while level > 0 && ARRAY_KINDS.contains(&self.frames[level - 1].kind) {
            field = self.frames[level - 1].field;
            level -= 1;
        }
        let parent = &self.frames[level.checked_sub(1)?];
        let target = match (parent.kind, field) {
            ("variable_declarator", Some("value")) => self.grammar.child(parent.node, "name"),
            ("assignment_expression" | "assignment", Some("right")) => {
                self.grammar.child(parent.node, "left")
            }
            _ => None,
        }?;
        (self.grammar.kind(target) == "identifier")
            .then(|| (self.text(target), parent.node.start_byte()))
    }

    /// A literal that stays code: strings hash by their decoded value, so quote style and
    /// escapes do not matter; what cannot be decoded hashes by its text.
    fn code_literal(&mut self, text: &str, candidate: &Candidate) {
        let decoded = match candidate {
            Candidate::Str if self.lang.is_python() => literal::decode_py_string(text),
            Candidate::Str => literal::decode_js_string(text),
            Candidate::Num { .. } => None,
        };
        match decoded {
            Some(value) => self
                .canon
                .tagged(canonical::TAG_CODE_STRING, value.as_bytes()),
            None => self.canon.token(text.as_bytes()),
        }
    }

    fn identifier(&mut self, node: Node<'t>, field: Option<&'static str>, named_index: usize) {
        let name = self.text(node);
        let holds_pieces = self
            .assigned_literals
            .get(name)
            .is_some_and(|pieces| !pieces.any.is_empty() || !pieces.items.is_empty());
        if holds_pieces && self.jdbc_driver_args(self.frames.len(), field, named_index) {
            // A variable assigned a `[user, password]` list, given as jaydebeapi's
            // `driver_args` (`creds = ["bob", "..."]` then `connect(d, url, creds)`): its
            // second item is the password (docs/normalization.md, Secrets).
            let taken = self.assigned_literals.get_mut(name).map(|pieces| {
                if pieces.list_len == 2 {
                    pieces.items.remove(&1).unwrap_or_default()
                } else {
                    Vec::new()
                }
            });
            for index in taken.into_iter().flatten() {
                if let Some(raw) = self.params.get_mut(index) {
                    raw.named_credential = true;
                }
            }
        }
        if holds_pieces && self.is_credential_value(field, named_index) {
            // A variable holding a literal (or pieces of one: `pw = "..." + x`, `pw =
            // f"{p}..."`, `parts = ["...", x]`), passed where a credential goes
            // (`login(password=pw)`): the literal is a secret (docs/normalization.md,
            // Secrets); of a list read by a literal index (`password=parts[1]`), that item
            // alone. Flagged once: a later use finds none left, so that uses cost no more
            // than pieces, however many of each.
            let item = self.read_item(field);
            let pieces = self.assigned_literals.get_mut(name).map(|pieces| {
                let mut taken = std::mem::take(&mut pieces.any);
                match item {
                    Some(item) => taken.extend(pieces.items.remove(&item).unwrap_or_default()),
                    None => taken.extend(pieces.items.drain().flat_map(|(_, p)| p)),
                }
                taken
            });
            for index in pieces.into_iter().flatten() {
                if let Some(raw) = self.params.get_mut(index) {
                    raw.named_credential = true;
                }
            }
        }
        let parent_kind = self.frames.last().map(|f| f.kind);
        // Attribute names and keyword names are not variables even when spelled like one.
        let not_a_variable = matches!(
            (parent_kind, field),
            (Some("attribute"), Some("attribute"))
                | (Some("keyword_argument"), Some("name"))
                | (Some("import_specifier" | "export_specifier"), Some("name"))
                | (Some("dotted_name"), _)
        );
        self.variable(name, !not_a_variable);
    }

    /// A variable reference: written as a name token that `resolve_names` turns into a
    /// positional local after the walk if the snippet binds it (bindings may come later).
    fn variable(&mut self, name: &'a str, may_rename: bool) {
        if may_rename {
            self.canon.tagged(canonical::TAG_NAME, name.as_bytes());
        } else {
            self.canon.token(name.as_bytes());
        }
    }

    /// Record the tool a call statically names, and mark tool/module name strings as code.
    fn call(&mut self, node: Node<'t>) {
        let grammar = self.grammar;
        let Some(function) = grammar.child(node, "function") else {
            return;
        };
        if matches!(grammar.kind(function), "import") || self.text(function) == "require" {
            if let Some(module) = self.first_string_arg(node) {
                self.code_literals.insert(module.start_byte());
            }
            return;
        }
        let Some(found) = tool_call(grammar, self.code, self.lang, node) else {
            return;
        };
        if let Some(literal) = found.name_literal {
            self.code_literals.insert(literal.start_byte());
        }
        self.tool_calls.push(found.tool);
    }

    /// The name a literal's context gives it: object key, keyword argument, assigned
    /// variable or default parameter, else callee and position. Arrays are looked through.
    fn context_name(&self, field: Option<&'static str>, named_index: usize) -> Option<String> {
        self.context_name_at(self.frames.len(), field, named_index)
    }

    /// `context_name` of a child of `frames[level - 1]`.
    fn context_name_at(
        &self,
        level: usize,
        field: Option<&'static str>,
        named_index: usize,
    ) -> Option<String> {
        let mut field = field;
        let mut index = named_index;
        let mut level = level;
        while level > 0 {
            let frame = &self.frames[level - 1];
            if !ARRAY_KINDS.contains(&frame.kind) {
                break;
            }
            field = frame.field;
            index = frame.named_index;
            level -= 1;
        }
        let parent = self.frames.get(level.checked_sub(1)?)?;
        let node = parent.node;
        let grammar = self.grammar;
        let field_text = |name: &str| grammar.child(node, name).map(|n| self.text(n));
        match (parent.kind, field) {
            ("pair", Some("value")) => {
                let key = grammar.child(node, "key")?;
                match grammar.kind(key) {
                    "string" if self.lang.is_python() => literal::decode_py_string(self.text(key)),
                    "string" => literal::decode_js_string(self.text(key)),
                    _ => Some(self.text(key).to_owned()),
                }
            }
            ("variable_declarator", Some("value"))
            | ("keyword_argument", Some("value"))
            | ("default_parameter" | "typed_default_parameter", Some("value")) => {
                field_text("name").map(str::to_owned)
            }
            ("assignment_pattern", Some("right")) => field_text("left").map(str::to_owned),
            (
                "assignment_expression"
                | "augmented_assignment_expression"
                | "assignment"
                | "augmented_assignment",
                Some("right"),
            ) => {
                let target = grammar.child(node, "left")?;
                match grammar.kind(target) {
                    "identifier" => Some(self.text(target).to_owned()),
                    "member_expression" => grammar
                        .child(target, "property")
                        .map(|n| self.text(n).to_owned()),
                    "attribute" => grammar
                        .child(target, "attribute")
                        .map(|n| self.text(n).to_owned()),
                    _ => None,
                }
            }
            ("arguments" | "argument_list", _) => {
                let call = self.frames.get(level.checked_sub(2)?)?.node;
                let function = grammar.child(call, "function")?;
                let callee = match grammar.kind(function) {
                    "identifier" => function,
                    "member_expression" => grammar.child(function, "property")?,
                    "attribute" => grammar.child(function, "attribute")?,
                    _ => return None,
                };
                Some(format!("{}_ARG{index}", self.text(callee)))
            }
            _ => None,
        }
    }
}

impl<'t> Walker<'_, 't> {
    /// Whether a sibling names a literal's value as a credential (`RawParam::named_credential`):
    /// the second call argument or the second of a pair (an array or tuple of two) after a
    /// credential's name, the third argument after a string naming one (`setattr(o,
    /// "password", "...")`), a `default=` after one, a value assigned to a subscript by a
    /// credential's name, or given after a credential with `||`, `??` or `or`. Only the one
    /// sibling is read, so the cost per literal is constant.
    fn named_credential(&mut self, field: Option<&'static str>, named_index: usize) -> bool {
        self.named_credential_at(self.frames.len(), field, named_index)
    }

    /// `named_credential` of a child of `frames[level - 1]`.
    fn named_credential_at(
        &mut self,
        level: usize,
        field: Option<&'static str>,
        named_index: usize,
    ) -> bool {
        let Some(parent) = level.checked_sub(1).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        let (node, kind) = (parent.node, parent.kind);
        if matches!(kind, "interpolation" | "template_substitution") {
            return self.url_password_interpolation(node) || self.secret_value_interpolation(node);
        }
        if matches!(kind, "arguments" | "argument_list")
            && (self.password_argument(level, named_index)
                || (named_index == 1 && self.env_default_given_as_credential(level)))
        {
            return true;
        }
        if matches!(kind, "array" | "list" | "tuple")
            && (self.argv_item_secret(level, named_index)
                || self.jdbc_password_item(level, named_index))
        {
            return true;
        }
        let grammar = self.grammar;
        let namer = match (kind, field) {
            // A list of names (`["Authorization", "Content-Type"]`) is no pair: two elements.
            ("array" | "list" | "tuple", _)
                if named_index == 1 && node.named_child_count() == 2 =>
            {
                node.named_children(&mut self.scratch)
                    .find(|c| !c.is_extra())
            }
            ("arguments" | "argument_list", _) if named_index == 1 => node
                .named_children(&mut self.scratch)
                .find(|c| !c.is_extra()),
            // the third argument after a string naming a credential: a field set on an object
            // (`setattr(cfg, "password", "...")`, `_.set(o, "token", "...")`), an option of a
            // section (`config.set("db", "password", "...")`), a hash's field (`hset(k,
            // "token", "...")`)
            ("arguments" | "argument_list", _) if named_index == 2 => node
                .named_children(&mut self.scratch)
                .filter(|c| !c.is_extra())
                .nth(1)
                .filter(|c| grammar.kind(*c) == "string"),
            ("keyword_argument", Some("value"))
                if grammar
                    .child(node, "name")
                    .is_some_and(|name| self.text(name) == "default") =>
            {
                match self.frames.get(level.wrapping_sub(2)) {
                    Some(list) if list.kind == "argument_list" => list
                        .node
                        .named_children(&mut self.scratch)
                        .find(|c| !c.is_extra()),
                    _ => None,
                }
            }
            // `{name: "DB_PASSWORD", value: "..."}` (a Kubernetes env entry, a header or a
            // secret given as a name and a value): the `value` of a map whose `name` or `key`
            // is a credential's name.
            ("pair", Some("value")) if self.keyed(node, &["value", "Value"]) => {
                match self.frames.get(level.wrapping_sub(2)) {
                    Some(map) if matches!(map.kind, "object" | "dictionary") => {
                        let mut cursor = map.node.walk();
                        let pairs: Vec<Node<'t>> = map
                            .node
                            .named_children(&mut cursor)
                            .filter(|c| grammar.kind(*c) == "pair")
                            .collect();
                        pairs
                            .into_iter()
                            .find(|p| self.keyed(*p, &["name", "Name", "key", "Key"]))
                            .and_then(|p| grammar.child(p, "value"))
                    }
                    _ => None,
                }
            }
            ("assignment_expression" | "assignment", Some("right")) => grammar
                .child(node, "left")
                .filter(|left| matches!(grammar.kind(*left), "subscript_expression" | "subscript")),
            ("binary_expression" | "boolean_operator", Some("right")) => grammar
                .child(node, "operator")
                .filter(|op| matches!(grammar.kind(*op), "||" | "??" | "or"))
                .and_then(|_| grammar.child(node, "left")),
            _ => None,
        };
        // A tool's or module's name is no credential's name (`call_tool("get_token", ...)`).
        namer.is_some_and(|namer| {
            !self.code_literals.contains(&namer.start_byte()) && self.names_credential(namer)
        })
    }

    /// Whether the argument at `named_index` of the call of `frames[level - 2]` is where its
    /// function takes a password by position (`PASSWORD_ARGUMENTS`: `smtp.login("bob", "...")`,
    /// `ftplib.FTP(h, u, "...")`).
    fn password_argument(&self, level: usize, named_index: usize) -> bool {
        let Some(call) = level.checked_sub(2).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        self.callee(call.node).is_some_and(|(callee, _)| {
            let name = self.text(callee);
            secrets::PASSWORD_ARGUMENTS
                .iter()
                .any(|&(f, at)| f == name && at == named_index)
        })
    }

    /// Whether the arguments `frames[level - 1]` are an environment lookup's (`env_lookup`)
    /// whose value is given where a credential goes (`api_key=os.getenv("K", "...")`, also as
    /// a piece: `"Bearer " + os.getenv("K", "...")`): its default, the second argument, is
    /// the value where the variable is unset, so a credential too (docs/normalization.md,
    /// Secrets). Climbs one call per lookup nested in another's default.
    fn env_default_given_as_credential(&mut self, level: usize) -> bool {
        let Some(call) = level.checked_sub(2).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        let (node, (top, field, index)) = (call.node, call.joined_top);
        self.env_lookup(node)
            && (self
                .context_name_at(top, field, index)
                .and_then(|context| naming::upper_snake(&context))
                .is_some_and(|context| secrets::is_secret_name(&context))
                || self.named_credential_at(top, field, index))
    }

    /// Whether item `named_index` of the list `frames[level - 1]` is the password of a JDBC
    /// connection's credentials given as a `[user, password]` pair (`JDBC_DRIVER_ARGS`):
    /// jaydebeapi's `driver_args`, its `connect`'s third argument
    /// (`jaydebeapi.connect(driver, "jdbc:...", ["bob", "..."])`) or named (`driver_args=[...]`).
    /// A `connect` is read so when it is `jaydebeapi`'s (called on it, or the snippet names
    /// it: an alias, a `from` import) or its second argument is a `jdbc:` URL; only a list of
    /// two items (docs/normalization.md, Secrets).
    fn jdbc_password_item(&mut self, level: usize, named_index: usize) -> bool {
        let Some(list) = level.checked_sub(1).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        let (list_node, list_field, list_index) = (list.node, list.field, list.named_index);
        named_index == 1
            && self.items_of(list_node) == 2
            && self.jdbc_driver_args(level - 1, list_field, list_index)
    }

    /// How many items a list written in place holds (comments aside).
    fn items_of(&mut self, list: Node<'t>) -> usize {
        list.named_children(&mut self.scratch)
            .filter(|c| !c.is_extra())
            .count()
    }

    /// Whether a child of `frames[level - 1]` at `field` and `named_index` is where a JDBC
    /// connection's credentials go as a `[user, password]` pair (`JDBC_DRIVER_ARGS`):
    /// jaydebeapi's `driver_args`, its `connect`'s third argument or named (`driver_args=`),
    /// a list written there (`jdbc_password_item`) or a variable assigned one (`identifier`).
    /// A `connect` is read so when it is `jaydebeapi`'s (called on it, or the snippet names
    /// it: an alias, a `from` import) or its second argument is a `jdbc:` URL
    /// (docs/normalization.md, Secrets).
    fn jdbc_driver_args(
        &mut self,
        level: usize,
        field: Option<&'static str>,
        named_index: usize,
    ) -> bool {
        let Some(holder) = level.checked_sub(1).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        let (holder_node, holder_kind) = (holder.node, holder.kind);
        let grammar = self.grammar;
        match holder_kind {
            "keyword_argument" => {
                field == Some("value")
                    && grammar
                        .child(holder_node, "name")
                        .is_some_and(|name| self.text(name) == secrets::JDBC_DRIVER_ARGS.2)
            }
            "arguments" | "argument_list" if named_index == secrets::JDBC_DRIVER_ARGS.1 => {
                let Some(call) = level.checked_sub(2).and_then(|at| self.frames.get(at)) else {
                    return false;
                };
                let Some((callee, receiver)) = self.callee(call.node) else {
                    return false;
                };
                if self.text(callee) != secrets::JDBC_DRIVER_ARGS.0 {
                    return false;
                }
                if self.names_jaydebeapi
                    || receiver.is_some_and(|r| self.text(r) == secrets::JDBC_DRIVER_MODULE)
                {
                    return true;
                }
                let url = holder_node
                    .named_children(&mut self.scratch)
                    .filter(|c| !c.is_extra())
                    .nth(1);
                url.and_then(|u| self.string_value(u))
                    .is_some_and(|u| u.get(..5).is_some_and(|s| s.eq_ignore_ascii_case("jdbc:")))
            }
            _ => false,
        }
    }

    /// Whether the pair's key is one of `keys`, written as a name or a string.
    fn keyed(&self, pair: Node<'t>, keys: &[&str]) -> bool {
        self.grammar.child(pair, "key").is_some_and(|key| {
            let text = self.text(key);
            let bare = text
                .strip_prefix(['"', '\''])
                .and_then(|t| t.strip_suffix(['"', '\'']))
                .unwrap_or(text);
            keys.contains(&bare)
        })
    }

    /// Whether an interpolation stands where a URL's password is written: the string's text
    /// just before it opens a user-info with a user (`f"postgresql://bob:{pw}@db"`,
    /// `` `https://${u}:${pw}@h` `` too, whose text before is `:`) and the text just after
    /// closes it (`@`, before any `/`, `?`, `#` or space): what it gives is the password
    /// (docs/normalization.md, Secrets). Reads the two texts beside it, each at most once per
    /// interpolation.
    fn url_password_interpolation(&self, interpolation: Node<'t>) -> bool {
        let text_of = |node: Option<Node<'t>>| {
            node.filter(|n| {
                matches!(
                    self.grammar.kind(*n),
                    "string_content" | "string_fragment" | "escape_sequence"
                )
            })
            .map(|n| self.text(n))
        };
        let Some(after) = text_of(interpolation.next_sibling()) else {
            return false;
        };
        let closes = after
            .bytes()
            .find(|b| matches!(b, b'@' | b'/' | b'?' | b'#') || b.is_ascii_whitespace())
            == Some(b'@');
        if !closes {
            return false;
        }
        let before = text_of(interpolation.prev_sibling()).unwrap_or("");
        // `scheme://user:` in the text before, or a `:` alone after a user interpolated
        let authority = before.rfind("://").map_or(before, |at| &before[at + 3..]);
        let opened = before.contains("://")
            && authority.contains(':')
            && !authority.contains(['/', '?', '#', '@', ' ']);
        opened
            || (before == ":"
                && interpolation
                    .prev_sibling()
                    .and_then(|t| t.prev_sibling())
                    .is_some_and(|user| {
                        matches!(
                            self.grammar.kind(user),
                            "interpolation" | "template_substitution"
                        )
                    }))
    }

    /// Whether an interpolation stands where a credential's value is written: the string's text
    /// just before it ends with a credential's name and `=` or `:`, maybe a quote or an HTTP
    /// auth scheme after (`sql`... password=${pw}``, `` `{"token": "${t}"}` ``,
    /// `f"Authorization: Bearer {t}"`; `secrets::opens_a_secret_value`), so what it gives is the
    /// credential (docs/normalization.md, Secrets).
    fn secret_value_interpolation(&self, interpolation: Node<'t>) -> bool {
        interpolation.prev_sibling().is_some_and(|before| {
            matches!(
                self.grammar.kind(before),
                "string_content" | "string_fragment"
            ) && secrets::opens_a_secret_value(self.text(before))
        })
    }

    /// Whether `node` is a credential's name: a string such as `"DB_PASSWORD"` or
    /// `"Authorization"` (a name, not a sentence), or a member, subscript or call that reads
    /// one (`process.env.API_TOKEN`, `os.environ["API_TOKEN"]`, `os.getenv("API_TOKEN")`).
    fn names_credential(&mut self, node: Node<'t>) -> bool {
        let grammar = self.grammar;
        let name = match grammar.kind(node) {
            "string" => {
                let text = self.text(node);
                let decoded = if self.lang.is_python() {
                    literal::decode_py_string(text)
                } else {
                    literal::decode_js_string(text)
                };
                decoded.filter(|s| {
                    !s.is_empty()
                        && s.len() <= 64
                        && s.bytes()
                            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
                })
            }
            "member_expression" => grammar
                .child(node, "property")
                .map(|p| self.text(p).to_owned()),
            "attribute" => grammar
                .child(node, "attribute")
                .map(|a| self.text(a).to_owned()),
            "subscript_expression" | "subscript" => {
                let field = if self.lang.is_python() {
                    "subscript"
                } else {
                    "index"
                };
                return grammar
                    .child(node, field)
                    .filter(|index| grammar.kind(*index) == "string")
                    .is_some_and(|index| self.names_credential(index));
            }
            "call_expression" | "call" => {
                return self
                    .first_string_arg(node)
                    .is_some_and(|first| self.names_credential(first));
            }
            _ => None,
        };
        name.and_then(|n| naming::upper_snake(&n))
            .is_some_and(|n| secrets::is_secret_name(&n))
    }

    /// The first argument of a call when it is a string literal (a tool or module name).
    fn first_string_arg(&mut self, call: Node<'t>) -> Option<Node<'t>> {
        let args = self.grammar.child(call, "arguments")?;
        let first = args
            .named_children(&mut self.scratch)
            .find(|c| !c.is_extra())?;
        (self.grammar.kind(first) == "string").then_some(first)
    }

    /// Whether item `named_index` of the list `frames[level - 1]` holds a credential when the
    /// list is read as an argv, each item one word, by the rules of a shell command line
    /// (`fallback::argv_secret_items`: `["mysql", "-pX"]`, `["curl", "-u", "bob:X", u]`). The
    /// list given after a string literal as a call's second argument is read after it, its
    /// command (`spawn("sshpass", ["-p", "X"])`, `execFile("psql", [...])`); any other only
    /// when its first item is a string literal (docs/normalization.md, Secrets).
    fn argv_item_secret(&mut self, level: usize, named_index: usize) -> bool {
        let Some(list) = level.checked_sub(1).and_then(|at| self.frames.get(at)) else {
            return false;
        };
        let (node, list_index) = (list.node, list.named_index);
        if let Some(items) = self.argv_items.get(&node.start_byte()) {
            return items.get(named_index).copied().unwrap_or(false);
        }
        let mut children: Vec<Node<'t>> = node
            .named_children(&mut self.scratch)
            .filter(|c| !c.is_extra())
            .take(fallback::MAX_ARGV_ITEMS + 1)
            .collect();
        let command = match level.checked_sub(2).and_then(|at| self.frames.get(at)) {
            Some(args) if matches!(args.kind, "arguments" | "argument_list") && list_index == 1 => {
                args.node
                    .named_children(&mut self.scratch)
                    .find(|c| !c.is_extra())
            }
            _ => None,
        };
        let command = command.filter(|c| self.string_value(*c).is_some());
        let prepended = command.is_some();
        if children.len() > fallback::MAX_ARGV_ITEMS {
            children.clear();
        } else if let Some(command) = command {
            children.insert(0, command);
        } else if children
            .first()
            .and_then(|c| self.string_value(*c))
            .is_none()
        {
            children.clear();
        }
        let values: Vec<Option<String>> = children.iter().map(|c| self.string_value(*c)).collect();
        let items: Vec<Option<&str>> = values.iter().map(Option::as_deref).collect();
        let mut secret = fallback::argv_secret_items(&items);
        if prepended && !secret.is_empty() {
            secret.remove(0);
        }
        let found = secret.get(named_index).copied().unwrap_or(false);
        self.argv_items.insert(node.start_byte(), secret);
        found
    }

    /// The decoded value of a string literal without interpolations, else None.
    fn string_value(&mut self, node: Node<'t>) -> Option<String> {
        let text = self.text(node);
        match self.grammar.kind(node) {
            "string" if self.lang.is_python() => {
                if self.has_child_kind(node, "interpolation") {
                    None
                } else {
                    literal::decode_py_string(text)
                }
            }
            "string" => literal::decode_js_string(text),
            "template_string" if !self.has_child_kind(node, "template_substitution") => {
                literal::decode_js_string(text)
            }
            _ => None,
        }
    }

    fn has_child_kind(&mut self, node: Node<'t>, kind: &str) -> bool {
        let grammar = self.grammar;
        let found = node
            .named_children(&mut self.scratch)
            .any(|c| grammar.kind(c) == kind);
        found
    }

    /// A Python expression statement that is only a string: a docstring or a no-op.
    fn is_docstring(&self, node: Node<'_>) -> bool {
        node.named_child_count() == 1
            && node
                .named_child(0)
                .is_some_and(|c| self.grammar.kind(c) == "string")
    }
}
