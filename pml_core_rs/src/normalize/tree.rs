//! The parsed path: one iterative walk over the tree-sitter CST that writes the canonical
//! form, extracts parameters with their context names and reads tool calls. No recursion:
//! ancestors live in an explicit stack, so nesting depth costs heap, never the thread stack.

use std::collections::{HashMap, HashSet};

use tree_sitter::{Node, Tree};

use super::canonical::{self, Canonical};
use super::language::Lang;
use super::literal::{self, JsonType};
use super::{RawParam, WalkError};

/// Receivers whose method calls are tool calls: `mcp.read_file(...)`, `tools.x(...)`.
pub const TOOL_ROOTS: &[&str] = &["mcp", "tools"];
/// Generic dispatch methods whose first (string) argument names the tool.
pub const DISPATCH_METHODS: &[&str] = &["call", "callTool", "call_tool", "invoke"];
/// Longest member chain read for a tool name (`mcp.server.tool` is 2).
const MAX_CHAIN: usize = 8;

pub struct TreeResult {
    pub params: Vec<RawParam>,
    pub tool_calls: Vec<String>,
}

struct Frame<'t> {
    node: Node<'t>,
    field: Option<&'static str>,
    /// This node's index among its parent's named, non-comment children.
    named_index: usize,
    named_seen: usize,
    /// Segment starts of a node whose children are reordered (object keys, keyword args).
    sorted: Option<Vec<(usize, bool)>>,
    /// Where a `;` child was written, while it is the last child seen: a statement's final
    /// semicolon is optional formatting in JS (ASI) and Python, so it is dropped on exit.
    trailing_semicolon: Option<usize>,
}

struct Walker<'a, 't> {
    code: &'a str,
    lang: Lang,
    canon: &'a mut Canonical,
    bound: HashSet<&'a str>,
    locals: HashMap<&'a str, usize>,
    params: Vec<RawParam>,
    tool_calls: Vec<String>,
    /// Start bytes of string literals that are code, not parameters (tool and module names).
    code_literals: HashSet<usize>,
    frames: Vec<Frame<'t>>,
}

pub fn walk<'a>(
    tree: &Tree,
    code: &'a str,
    lang: Lang,
    canon: &'a mut Canonical,
    bound: HashSet<&'a str>,
    max_depth: usize,
) -> Result<TreeResult, WalkError> {
    let mut walker = Walker {
        code,
        lang,
        canon,
        bound,
        locals: HashMap::new(),
        params: Vec::new(),
        tool_calls: Vec::new(),
        code_literals: HashSet::new(),
        frames: Vec::new(),
    };
    let mut cursor = tree.walk();
    'outer: loop {
        let node = cursor.node();
        let field = cursor.field_name();
        if walker.enter(node, field)? {
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
    Ok(TreeResult {
        params: walker.params,
        tool_calls: walker.tool_calls,
    })
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
    fn enter(&mut self, node: Node<'t>, field: Option<&'static str>) -> Result<bool, WalkError> {
        if node.is_extra() {
            return Ok(false); // comments (and Python line continuations) never count
        }
        let mut named_index = 0;
        let position = self.canon.position();
        if let Some(parent) = self.frames.last_mut() {
            parent.trailing_semicolon =
                (node.kind() == ";" && !node.is_named()).then_some(position);
            if node.is_named() {
                named_index = parent.named_seen;
                parent.named_seen += 1;
            }
            if let Some(segments) = parent.sorted.as_mut() {
                if !node.is_named() {
                    return Ok(false); // braces and commas of a reordered node
                }
                let sortable =
                    parent.node.kind() != "argument_list" || node.kind() == "keyword_argument";
                segments.push((self.canon.position(), sortable));
            }
        }
        let kind = node.kind();
        if let Some(candidate) = self.candidate(node, kind) {
            self.literal(node, field, named_index, candidate);
            return Ok(false);
        }
        match kind {
            "identifier" => {
                self.identifier(node, field);
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
            "expression_statement" if self.lang.is_python() && is_docstring(node) => {
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
        self.frames.push(Frame {
            node,
            field,
            named_index,
            named_seen: 0,
            sorted,
            trailing_semicolon: None,
        });
        Ok(true)
    }

    fn exit(&mut self) {
        if let Some(frame) = self.frames.pop() {
            if let Some(at) = frame.trailing_semicolon {
                self.canon.truncate(at);
            }
            if let Some(segments) = frame.sorted {
                self.canon.sort_segments(&segments);
            }
            self.canon.token(canonical::TAG_CLOSE);
        }
    }

    /// Object literals passed as call arguments (and objects nested in them) hash with
    /// sorted keys; Python keyword arguments hash in sorted order after the positional ones.
    fn reorders_children(&self, node: Node<'t>, kind: &str) -> bool {
        let has_child_kind = |kinds: &[&str]| {
            let mut cursor = node.walk();
            let found = node
                .named_children(&mut cursor)
                .any(|c| kinds.contains(&c.kind()));
            found
        };
        match kind {
            "argument_list" => !has_child_kind(&["list_splat", "dictionary_splat"]),
            "object" | "dictionary" => {
                let n = self.frames.len();
                let in_argument_position = match self.frames.last() {
                    Some(parent) => match parent.node.kind() {
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

    fn candidate(&self, node: Node<'t>, kind: &str) -> Option<Candidate> {
        let python = self.lang.is_python();
        match kind {
            // An f-string with interpolations is code with expressions inside: walk into it.
            "string" if python && has_child_kind(node, "interpolation") => None,
            "string" => Some(Candidate::Str),
            "template_string" if !python => {
                (!has_child_kind(node, "template_substitution")).then_some(Candidate::Str)
            }
            "number" if !python => Some(Candidate::Num { negative: false }),
            "integer" | "float" if python => Some(Candidate::Num { negative: false }),
            "unary_expression" | "unary_operator" => {
                let operator = node.child_by_field_name("operator")?;
                let argument = node.child_by_field_name("argument")?;
                let numeric = matches!(argument.kind(), "number" | "integer" | "float");
                (operator.kind() == "-" && numeric).then_some(Candidate::Num { negative: true })
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
            (parent.node.kind(), field),
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
        let decoded = if self.literal_is_code(node, field) {
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
                        node.child_by_field_name("argument").map(|a| self.text(a))
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
            return;
        };
        self.canon.token(match json_type {
            JsonType::String => canonical::TAG_STRING_PARAM,
            _ => canonical::TAG_NUMBER_PARAM,
        });
        let context = self.context_name(field, named_index);
        let (value_json, string_value) = match json_type {
            JsonType::String => (
                serde_json::Value::String(value.clone()).to_string(),
                Some(value),
            ),
            _ => (value, None),
        };
        self.params.push(RawParam {
            start: node.start_byte(),
            end: node.end_byte(),
            json_type,
            value_json,
            string_value,
            context,
        });
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

    fn identifier(&mut self, node: Node<'t>, field: Option<&'static str>) {
        let name = self.text(node);
        let parent_kind = self.frames.last().map(|f| f.node.kind());
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

    fn variable(&mut self, name: &'a str, may_rename: bool) {
        if may_rename && self.bound.contains(name) {
            let next = self.locals.len();
            let index = *self.locals.entry(name).or_insert(next);
            self.canon
                .tagged(canonical::TAG_LOCAL, index.to_string().as_bytes());
        } else {
            self.canon.token(name.as_bytes());
        }
    }

    /// Record the tool a call statically names, and mark tool/module name strings as code.
    fn call(&mut self, node: Node<'t>) {
        let Some(function) = node.child_by_field_name("function") else {
            return;
        };
        let first_string_arg = || {
            let args = node.child_by_field_name("arguments")?;
            let mut cursor = args.walk();
            let first = args.named_children(&mut cursor).find(|c| !c.is_extra())?;
            (first.kind() == "string").then_some(first)
        };
        if matches!(function.kind(), "import") || self.text(function) == "require" {
            if let Some(module) = first_string_arg() {
                self.code_literals.insert(module.start_byte());
            }
            return;
        }
        let mut segments: Vec<&'a str> = Vec::new();
        let mut current = function;
        loop {
            let (object, name) = match current.kind() {
                "member_expression" => ("object", "property"),
                "attribute" => ("object", "attribute"),
                "identifier" => break,
                _ => return,
            };
            let (Some(next), Some(name)) = (
                current.child_by_field_name(object),
                current.child_by_field_name(name),
            ) else {
                return;
            };
            segments.push(self.text(name));
            if segments.len() > MAX_CHAIN {
                return;
            }
            current = next;
        }
        if !TOOL_ROOTS.contains(&self.text(current)) {
            return;
        }
        segments.reverse();
        let Some((&last, server)) = segments.split_last() else {
            return;
        };
        let tool = if DISPATCH_METHODS.contains(&last) {
            let Some(name_node) = first_string_arg() else {
                return; // a computed tool name cannot be read statically
            };
            self.code_literals.insert(name_node.start_byte());
            let text = self.text(name_node);
            let decoded = if self.lang.is_python() {
                literal::decode_py_string(text)
            } else {
                literal::decode_js_string(text)
            };
            let Some(name) = decoded else { return };
            if server.is_empty() {
                name
            } else {
                format!("{}:{name}", server.join(":"))
            }
        } else {
            segments.join(":")
        };
        self.tool_calls.push(tool);
    }

    /// The name a literal's context gives it: object key, keyword argument, assigned
    /// variable or default parameter, else callee and position. Arrays are looked through.
    fn context_name(&self, field: Option<&'static str>, named_index: usize) -> Option<String> {
        let mut field = field;
        let mut index = named_index;
        let mut level = self.frames.len();
        while level > 0 {
            let frame = &self.frames[level - 1];
            if !matches!(frame.node.kind(), "array" | "list" | "tuple" | "set") {
                break;
            }
            field = frame.field;
            index = frame.named_index;
            level -= 1;
        }
        let parent = self.frames.get(level.checked_sub(1)?)?;
        let node = parent.node;
        let field_text = |name: &str| node.child_by_field_name(name).map(|n| self.text(n));
        match (node.kind(), field) {
            ("pair", Some("value")) => {
                let key = node.child_by_field_name("key")?;
                match key.kind() {
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
                let target = node.child_by_field_name("left")?;
                match target.kind() {
                    "identifier" => Some(self.text(target).to_owned()),
                    "member_expression" => {
                        field_of(target, "property").map(|n| self.text(n).to_owned())
                    }
                    "attribute" => field_of(target, "attribute").map(|n| self.text(n).to_owned()),
                    _ => None,
                }
            }
            ("arguments" | "argument_list", _) => {
                let call = self.frames.get(level.checked_sub(2)?)?.node;
                let function = call.child_by_field_name("function")?;
                let callee = match function.kind() {
                    "identifier" => function,
                    "member_expression" => field_of(function, "property")?,
                    "attribute" => field_of(function, "attribute")?,
                    _ => return None,
                };
                Some(format!("{}_ARG{index}", self.text(callee)))
            }
            _ => None,
        }
    }
}

fn has_child_kind(node: Node<'_>, kind: &str) -> bool {
    let mut cursor = node.walk();
    let found = node.named_children(&mut cursor).any(|c| c.kind() == kind);
    found
}

fn field_of<'t>(node: Node<'t>, field: &str) -> Option<Node<'t>> {
    node.child_by_field_name(field)
}

/// A Python expression statement that is only a string: a docstring or a no-op.
fn is_docstring(node: Node<'_>) -> bool {
    node.named_child_count() == 1 && node.named_child(0).is_some_and(|c| c.kind() == "string")
}
