//! Steps and data flow (docs/normalization.md, Steps): every tool call of a parsed snippet
//! becomes a step, in the order of `tool_calls`, and each of its arguments is classified as a
//! parameter (a literal taken out as a placeholder, directly or through a variable), a literal
//! that stayed code, a reference to earlier steps' outputs (`r1`, `r1.field`, `r1["x"]`, a
//! template string, a variable assigned from a call or from another reference), or unknown.
//! A name's value is its latest binding before a use that is still in scope there: a
//! declaration holds to the end of its block (`let`, `const`) or function (`var`, parameters,
//! Python), an assignment as far as what it replaces; one made in a branch (`if`, a loop, a
//! function...) holds, past the branch, with what the name held before it.
//! Code whose flow cannot be read (loops, callbacks) keeps its steps, in call order, with
//! `flow_known == false`; what cannot be resolved is `Unknown`, never an error. Costs are
//! bounded: at most `MAX_STEPS` steps, `MAX_STEP_ARGUMENTS` arguments per step and
//! `MAX_ARGUMENT_NODES` syntax nodes read per argument, `MAX_SOURCE_PATHS` sources listed with
//! their paths (then one per further step) and `MAX_PATH_BYTES` of a path.

use std::collections::HashMap;

use tree_sitter::{Node, Tree};

use super::grammar::Grammar;
use super::language::Lang;
use super::literal;
use super::tree::{tool_call, ToolArguments, ToolCall};

/// Most steps read from one snippet; later calls are still in `tool_calls`.
pub const MAX_STEPS: usize = 256;
/// Most arguments listed per step; later ones are dropped from the step (not from the code).
pub const MAX_STEP_ARGUMENTS: usize = 64;
/// Most syntax nodes read to classify one argument; past it the argument is `Unknown`.
pub const MAX_ARGUMENT_NODES: usize = 512;
/// Most (step, path) sources an argument or a binding lists; past it a source is listed only
/// for a step not listed yet, so every edge is kept. Without it `x = [x.a, x.b]` written n
/// times read 2^n paths (docs/normalization.md, Steps).
pub const MAX_SOURCE_PATHS: usize = 64;
/// Longest path a source names; a path stops before the segment that would pass it (what it
/// names still holds the value read). Without it a path grew by a binding's whole path at every
/// rebinding (`x = x.a.b`), quadratic in the code.
pub const MAX_PATH_BYTES: usize = 256;
/// Most sources one snippet's names may read and bind in all (each a copy of a path): past it
/// a name read reads as unknown. Without it every rebinding of a name read by many paths
/// (`x = [x.a, x.b, x.c]` over 1 MB) held its own copies of them all, gigabytes in total.
pub const MAX_SNIPPET_SOURCES: usize = 65_536;

/// What an argument's value is made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ArgKind {
    /// Only placeholders (and literal code): the caller supplies it.
    Parameter,
    /// Constant code only (`true`, `null`, a literal past the parameter cap).
    Literal,
    /// Uses the output of at least one earlier step.
    Reference,
    /// Anything else: free variables, loop variables over no step, functions returning no
    /// step output, spreads.
    Unknown,
}

impl ArgKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArgKind::Parameter => "parameter",
            ArgKind::Literal => "literal",
            ArgKind::Reference => "reference",
            ArgKind::Unknown => "unknown",
        }
    }
}

/// A step output an argument reads: step index (0-based, into `steps`) and the path read in it
/// (`""` for the whole output, `.field`, `["x"]`, `[0]`, `[*]` for a computed index).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepSource {
    pub step: usize,
    pub path: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepArgument {
    /// The key or keyword it is passed under, else its position (`"0"`, `"1"`...).
    pub name: String,
    pub kind: ArgKind,
    /// Placeholder names it is built from (`$PATH`), in source order, without repeats.
    pub parameters: Vec<String>,
    /// Step outputs it reads (non-empty exactly when `kind == Reference`).
    pub sources: Vec<StepSource>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Step {
    pub tool: String,
    pub arguments: Vec<StepArgument>,
    /// Steps whose outputs this one reads, ascending, without repeats: the DAG's edges.
    pub depends_on: Vec<usize>,
    /// False inside a loop or a callback, or when the code was not parsed: the step may run
    /// several times or later, and its arguments may not be all listed.
    pub flow_known: bool,
}

/// Steps for code the tree path did not read: the tools in call order, nothing more.
pub fn unread_steps(tool_calls: &[String]) -> Vec<Step> {
    tool_calls
        .iter()
        .take(MAX_STEPS)
        .map(|tool| Step {
            tool: tool.clone(),
            arguments: Vec::new(),
            depends_on: Vec::new(),
            flow_known: false,
        })
        .collect()
}

/// A step as read from the tree, parameters still as indexes into the raw parameter list.
pub(crate) struct RawStep {
    pub tool: String,
    pub arguments: Vec<RawArgument>,
    pub depends_on: Vec<usize>,
    pub flow_known: bool,
}

pub(crate) struct RawArgument {
    pub name: String,
    pub kind: ArgKind,
    pub params: Vec<usize>,
    pub sources: Vec<StepSource>,
}

/// What a name is bound to at some point of the code.
#[derive(Clone)]
enum Binding {
    Steps(Vec<StepSource>),
    Params(Vec<usize>),
    Other,
    /// A sequence written element by element (`[a, b]`, `x, y`, `Promise.all([...])`,
    /// `asyncio.gather(...)`): `items[i]` is what element `i` holds, `whole` what the sequence
    /// as a value reads. Destructuring and a constant index take one element, so
    /// `const [a, b] = await Promise.all([mcp.a(), mcp.b()])` gives `a` step 0's output alone.
    Elements {
        whole: Box<Binding>,
        items: Vec<Binding>,
    },
}

/// A name's binding from `position` to `end` (its scope's end).
struct Entry {
    position: usize,
    end: usize,
    binding: Binding,
    /// Made for the end of a branch: what the name held before it or was given in it.
    joined: bool,
    /// Made for the start of a clause after the one a name was assigned in (`Restore`).
    restore: bool,
}

/// Insert into `list` (sorted by position) after every entry at the same position, but before
/// the joined ones there: what a branch ends with is read past it.
fn insert_entry(
    list: &mut Vec<Entry>,
    position: usize,
    end: usize,
    binding: Binding,
    joined: bool,
    restore: bool,
) {
    let at = list.partition_point(|e| {
        e.position < position || (e.position == position && (joined || !e.joined))
    });
    list.insert(
        at,
        Entry {
            position,
            end,
            binding,
            joined,
            restore,
        },
    );
}

/// What a name holds when it may hold `a` or `b` (or both: `xs.push(v)`).
fn union(a: &Binding, b: &Binding) -> Binding {
    fn add(binding: &Binding, found: &mut Found) {
        match binding {
            Binding::Steps(sources) => {
                for s in sources {
                    found.add_source(s.step, s.path.clone());
                }
            }
            Binding::Params(params) => {
                for &p in params {
                    found.add_param(p);
                }
            }
            Binding::Other => found.unknown = true,
            Binding::Elements { whole, .. } => add(whole, found),
        }
    }
    let mut found = Found::default();
    add(a, &mut found);
    add(b, &mut found);
    match found.kind() {
        ArgKind::Reference => Binding::Steps(found.sources),
        ArgKind::Parameter => Binding::Params(found.params),
        _ => Binding::Other,
    }
}

/// Most elements of a sequence bound element by element; a longer one is bound as a whole.
const MAX_ELEMENTS: usize = 64;

impl Binding {
    /// This binding with `segments` appended to every step source's path (`join_path`); a
    /// sequence becomes what it reads as a whole (an element's own path is not known past a
    /// non-constant segment).
    fn at_path(&self, segments: &[String]) -> Binding {
        match self {
            Binding::Steps(sources) => {
                let mut found = Found::default();
                for s in sources {
                    found.add_source(s.step, join_path(&s.path, segments));
                }
                Binding::Steps(found.sources)
            }
            Binding::Elements { .. } if segments.iter().all(|s| s.is_empty()) => self.clone(),
            Binding::Elements { whole, .. } => whole.at_path(segments),
            other => other.clone(),
        }
    }

    /// How many sources (and placeholders) it holds: what reading or binding it copies.
    fn size(&self) -> usize {
        match self {
            Binding::Steps(sources) => sources.len(),
            Binding::Params(params) => params.len(),
            Binding::Other => 0,
            Binding::Elements { whole, items } => {
                whole.size() + items.iter().map(Binding::size).sum::<usize>()
            }
        }
    }
}

/// `base` followed by as many of `segments` as fit in `MAX_PATH_BYTES`.
fn join_path(base: &str, segments: &[String]) -> String {
    let mut path = base.to_owned();
    for segment in segments {
        if path.len() + segment.len() > MAX_PATH_BYTES {
            break;
        }
        path.push_str(segment);
    }
    path
}

#[derive(Default)]
struct Found {
    params: Vec<usize>,
    sources: Vec<StepSource>,
    unknown: bool,
}

impl Found {
    /// Add a source read, unless listed already; past `MAX_SOURCE_PATHS` only a source of a
    /// step not listed yet.
    fn add_source(&mut self, step: usize, path: String) {
        let listed = self
            .sources
            .iter()
            .any(|s| s.step == step && s.path == path);
        let step_listed = || self.sources.iter().any(|s| s.step == step);
        if listed || (self.sources.len() >= MAX_SOURCE_PATHS && step_listed()) {
            return;
        }
        self.sources.push(StepSource { step, path });
    }

    /// Add a placeholder read, unless listed already.
    fn add_param(&mut self, index: usize) {
        if !self.params.contains(&index) {
            self.params.push(index);
        }
    }

    fn kind(&self) -> ArgKind {
        if !self.sources.is_empty() {
            ArgKind::Reference
        } else if self.unknown {
            ArgKind::Unknown
        } else if !self.params.is_empty() {
            ArgKind::Parameter
        } else {
            ArgKind::Literal
        }
    }
}

struct Reader<'a, 't> {
    code: &'a str,
    lang: Lang,
    grammar: &'static Grammar,
    /// Tool calls by (start, end) byte: their step index. The end too, because a method
    /// called on a call's output (`mcp.a().then(f)`) starts where the call does.
    calls: HashMap<(usize, usize), usize>,
    /// Raw parameters by start byte: (end byte, index).
    params: HashMap<usize, (usize, usize)>,
    /// Bindings of each name, sorted by the position they take effect from.
    bindings: HashMap<&'a str, Vec<Entry>>,
    /// The scope of the site being bound (`Site::scope_end`, `Site::branches`).
    site_scope: (Option<usize>, Branches),
    budget: usize,
    /// What is left of `MAX_SNIPPET_SOURCES`.
    sources_left: usize,
    /// The start of the clause after each clause or consequence ((start, end) bytes), in the
    /// statement they are in (`CLAUSES`).
    next_clauses: HashMap<(usize, usize), usize>,
    _tree: std::marker::PhantomData<&'t ()>,
}

/// Read the steps of a parsed snippet whose tool calls are `tool_calls` (in the tree walk's
/// order); `param_spans` are the raw parameters' byte spans. `None` when the calls read here
/// disagree with `tool_calls` (the caller then uses `unread_steps`).
pub(crate) fn read_steps(
    tree: &Tree,
    code: &str,
    lang: Lang,
    tool_calls: &[String],
    param_spans: &[(usize, usize)],
) -> Option<Vec<RawStep>> {
    let grammar = lang.tables();
    // (call, tool, deferred): deferred inside a loop or a callback (see `deferred_scope`).
    let mut calls: Vec<(Node<'_>, ToolCall<'_>, bool)> = Vec::new();
    let mut sites: Vec<Site<'_>> = Vec::new();
    // Per ancestor of the cursor's node: its kind and whether its children are deferred. Kept
    // by the walk itself, because `Node::parent` rescans siblings (quadratic on long code).
    let mut scopes: Vec<(&'static str, bool)> = Vec::new();
    // The ancestors themselves, for the scopes of the names bound (`binding_sites`).
    let mut ancestors: Vec<Node<'_>> = Vec::new();
    let mut declared: Declared = HashMap::new();
    let mut next_clauses: HashMap<(usize, usize), usize> = HashMap::new();
    // Per level of the walk, the last named node seen there: what a clause follows.
    let mut previous: Vec<Option<Node<'_>>> = vec![None];
    let mut cursor = tree.walk();
    // Pre-order walk, the order the tree walk records tool calls in.
    'outer: loop {
        let node = cursor.node();
        let kind = grammar.kind(node);
        let (parent_kind, inherited) = scopes.last().copied().unwrap_or(("", false));
        let mut is_tool = false;
        if matches!(kind, "call_expression" | "call") {
            if let Some(found) = tool_call(grammar, code, lang, node) {
                calls.push((node, found, inherited));
                is_tool = true;
            }
        }
        if !is_tool {
            declare(grammar, code, node, &ancestors, &mut declared);
            binding_sites(grammar, code, lang, node, &ancestors, &declared, &mut sites);
        }
        if node.is_named() && !node.is_extra() {
            if let (true, Some(Some(before))) = (CLAUSES.contains(&kind), previous.last()) {
                next_clauses.insert((before.start_byte(), before.end_byte()), node.start_byte());
            }
            if let Some(last) = previous.last_mut() {
                *last = Some(node);
            }
        }
        if cursor.goto_first_child() {
            scopes.push((kind, inherited || deferred_scope(kind, parent_kind)));
            ancestors.push(node);
            previous.push(None);
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                continue 'outer;
            }
            if !cursor.goto_parent() {
                break 'outer;
            }
            scopes.pop();
            ancestors.pop();
            previous.pop();
        }
    }
    if calls.len() != tool_calls.len() || calls.iter().zip(tool_calls).any(|(c, t)| &c.1.tool != t)
    {
        return None;
    }
    calls.truncate(MAX_STEPS);
    let mut reader = Reader {
        code,
        lang,
        grammar,
        calls: calls
            .iter()
            .enumerate()
            .map(|(i, (node, _, _))| ((node.start_byte(), node.end_byte()), i))
            .collect(),
        params: param_spans
            .iter()
            .enumerate()
            .map(|(i, &(start, end))| (start, (end, i)))
            .collect(),
        bindings: HashMap::new(),
        site_scope: (None, Branches::default()),
        budget: 0,
        sources_left: MAX_SNIPPET_SOURCES,
        next_clauses,
        _tree: std::marker::PhantomData,
    };
    // Bindings take effect where their statement ends; each value is read against the
    // bindings before it, so they are resolved in that order.
    sites.sort_by_key(|site| site.position);
    for Site {
        position,
        pattern,
        value,
        how,
        scope_end,
        branches,
    } in sites
    {
        let binding = match value {
            Some(value) if how == How::Each => reader.element_binding(value),
            // `xs.push(v)`, `o.k = v`, `s += v`: what the name held and what is added.
            Some(value) if how == How::Add => {
                let added = reader.value_binding(value);
                match reader.lookup(reader.text(pattern), position) {
                    Some(held) => union(held, &added),
                    None => added,
                }
            }
            Some(value) => {
                let whole = reader.value_binding(value);
                match reader.elements(value) {
                    Some(elements) => Binding::Elements {
                        whole: Box::new(whole),
                        items: elements
                            .into_iter()
                            .map(|element| reader.value_binding(element))
                            .collect(),
                    },
                    None => whole,
                }
            }
            None => Binding::Other,
        };
        reader.site_scope = (scope_end, branches);
        reader.bind(pattern, position, &binding, String::new(), 0);
    }
    let mut steps = Vec::with_capacity(calls.len());
    for (index, (node, found, deferred)) in calls.iter().enumerate() {
        let arguments = reader.arguments(*node, &found.arguments);
        let mut depends_on: Vec<usize> = arguments
            .iter()
            .flat_map(|a| a.sources.iter().map(|s| s.step))
            .filter(|&s| s != index)
            .collect();
        depends_on.sort_unstable();
        depends_on.dedup();
        steps.push(RawStep {
            tool: found.tool.clone(),
            arguments,
            depends_on,
            flow_known: !deferred,
        });
    }
    Some(steps)
}

fn decode_string(lang: Lang, raw: &str) -> Option<String> {
    if lang.is_python() {
        literal::decode_py_string(raw)
    } else {
        literal::decode_js_string(raw)
    }
}

/// Where a name gets bound: from `position` on, the names of `pattern` hold `value` (unknown
/// without one), one element of it at a time (`How::Each`: a loop's or a callback's
/// variable), or what they held and `value` too (`How::Add`: `pattern` is then one name).
struct Site<'t> {
    position: usize,
    pattern: Node<'t>,
    value: Option<Node<'t>>,
    how: How,
    /// Where the names stop being visible (their block or function ends); `None` for an
    /// assignment, which holds as far as the binding it replaces (the whole snippet if none).
    scope_end: Option<usize>,
    /// The branches (`if`, loop, `try`, `switch`, conditional expression; in JS a function
    /// too) the site is in, up to its function, and the clauses after its own.
    branches: Branches,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    Value,
    Each,
    Add,
}

/// Methods that add their arguments to the value they are called on.
const ADDING_METHODS: &[&str] = &[
    "push",
    "unshift",
    "append",
    "appendleft",
    "extend",
    "insert",
    "add",
    "update",
    "set",
    "setdefault",
];

/// Most bindings of a name passed over, out of scope, to find the one a use reads; past it
/// the name reads as unknown. Without it a use after n functions that each bind the name
/// locally passed over all n, quadratic in the code.
const MAX_SCOPE_SKIPS: usize = 256;

/// Where the names a function's body binds stop being visible: the innermost function's end.
fn function_end(grammar: &Grammar, ancestors: &[Node<'_>]) -> usize {
    ancestors
        .iter()
        .rev()
        .find(|a| is_function(grammar.kind(**a)))
        .map_or(usize::MAX, |a| a.end_byte())
}

/// Where a JS `let`, `const` or function declaration stops being visible: its block's end.
fn block_end(grammar: &Grammar, ancestors: &[Node<'_>]) -> usize {
    ancestors
        .iter()
        .rev()
        .find(|a| {
            let kind = grammar.kind(**a);
            is_function(kind)
                || matches!(
                    kind,
                    "statement_block"
                        | "for_statement"
                        | "for_in_statement"
                        | "switch_body"
                        | "class_body"
                )
        })
        .map_or(usize::MAX, |a| a.end_byte())
}

/// Most branches around an assignment its name is joined past (`Site::branches`); an
/// assignment in more binds its names to something unknown (`Branches::too_deep`): joined
/// past only some of them, a clause after its own could read it (docs/normalization.md,
/// Steps).
const MAX_BRANCHES: usize = 32;

/// The branches an assignment is in, innermost first (`Site::branches`).
#[derive(Clone, Default)]
pub(crate) struct Branches {
    /// (start, end) bytes of each branch: past its end the name holds what it held before the
    /// branch or what the branch gave it; only what it gave when the assignment runs whenever
    /// the code past the branch does (the third, `definite`: `try_definite`).
    joins: Vec<(usize, usize, bool)>,
    /// The clause after the one the assignment is in, of an `if` (`else`, `elif`), a `try`
    /// (`except`, `catch`, `finally`), a JS `switch` or a Python `match`.
    restores: Vec<Restore>,
    /// In more than `MAX_BRANCHES` branches.
    too_deep: bool,
}

/// From the start of the clause after `clause` (its (start, end) bytes; recorded by the walk:
/// `Reader::next_clauses`) the name holds again what it held before `before` (the statement's
/// start: `else` runs instead of `if`), with what the assignment gave (`with_value`: a `try`
/// clause may run after it, a `switch` case falls through; `before` is then the start of the
/// assignment's own clause).
#[derive(Clone, Copy)]
struct Restore {
    before: usize,
    clause: (usize, usize),
    with_value: bool,
    /// The clause after holds what the assignment gave alone: a `try`'s `else` after an
    /// assignment in its body (`else` runs only once the body completed).
    only_value: bool,
}

/// The branches an assignment (at `node`) is in (`Site::branches`): a function ends the
/// search, and in JS is one (an assignment there may run later or never); `cross` functions
/// are crossed as branches (a Python `global` or `nonlocal` name).
fn branches(
    grammar: &Grammar,
    lang: Lang,
    node: Node<'_>,
    ancestors: &[Node<'_>],
    mut cross: usize,
) -> Branches {
    let mut found = Branches::default();
    for (i, a) in ancestors.iter().enumerate().rev() {
        let kind = grammar.kind(*a);
        let full = found.joins.len() == MAX_BRANCHES;
        if is_function(kind) {
            if !lang.is_python() || cross > 0 {
                if full {
                    found.too_deep = true;
                    break;
                }
                found.joins.push((a.start_byte(), a.end_byte(), false));
            }
            if cross == 0 {
                break;
            }
            cross -= 1;
            continue;
        }
        // The clause of `a` the assignment is in, and the statement of `a` when `a` is one.
        let clause = ancestors.get(i + 1).copied().unwrap_or(node);
        let statement = i.checked_sub(2).and_then(|p| ancestors.get(p)).copied();
        let restore = match kind {
            "if_statement" if grammar.child(*a, "condition") != Some(clause) => {
                Some((a.start_byte(), clause, false))
            }
            "try_statement" => Some((clause.start_byte(), clause, true)),
            "switch_case" | "switch_default" => Some((a.start_byte(), *a, true)),
            "case_clause" => statement.map(|m| (m.start_byte(), *a, false)),
            _ => None,
        };
        if let Some((before, clause, with_value)) = restore {
            found.restores.push(Restore {
                before,
                clause: (clause.start_byte(), clause.end_byte()),
                with_value,
                only_value: false,
            });
        }
        if kind == "try_statement"
            && found.joins.is_empty()
            && grammar.child(*a, "body") == Some(clause)
        {
            found.restores.extend(else_restores(grammar, *a, clause));
        }
        if matches!(
            kind,
            "if_statement"
                | "switch_statement"
                | "match_statement"
                | "try_statement"
                | "for_statement"
                | "for_in_statement"
                | "while_statement"
                | "do_statement"
                | "ternary_expression"
                | "conditional_expression"
        ) {
            if full {
                found.too_deep = true;
                break;
            }
            let definite = kind == "try_statement"
                && found.joins.is_empty()
                && try_definite(grammar, *a, clause);
            found.joins.push((a.start_byte(), a.end_byte(), definite));
        }
    }
    found
}

/// For an assignment in the body `body` of the `try` statement `statement`, in no branch
/// within it: its `else` clause holds what it gave alone (the clause before `else` restores
/// so), and a `finally` after the `else` what the name held before the body too (the body may
/// have raised; docs/normalization.md, Steps).
fn else_restores(grammar: &Grammar, statement: Node<'_>, body: Node<'_>) -> Vec<Restore> {
    let mut cursor = statement.walk();
    let clauses: Vec<Node<'_>> = statement
        .named_children(&mut cursor)
        .filter(|c| !c.is_extra())
        .collect();
    let Some(at) = clauses
        .iter()
        .position(|c| grammar.kind(*c) == "else_clause")
    else {
        return Vec::new();
    };
    let mut found = Vec::new();
    if let Some(previous) = at.checked_sub(1).map(|p| clauses[p]) {
        found.push(Restore {
            before: body.start_byte(),
            clause: (previous.start_byte(), previous.end_byte()),
            with_value: true,
            only_value: true,
        });
    }
    if clauses
        .get(at + 1)
        .is_some_and(|c| grammar.kind(*c) == "finally_clause")
    {
        let else_clause = clauses[at];
        found.push(Restore {
            before: body.start_byte(),
            clause: (else_clause.start_byte(), else_clause.end_byte()),
            with_value: true,
            only_value: false,
        });
    }
    found
}

/// Whether an assignment made in `clause` of the `try` statement `statement`, in no branch
/// within it, has run whenever the code after the statement runs: in its `finally`, which
/// always runs, or in its body when no `except` or `catch` clause may end an exception there
/// (the code after runs only when the body completed). Otherwise the name holds, past the
/// statement, what it held before too (docs/normalization.md, Steps).
fn try_definite(grammar: &Grammar, statement: Node<'_>, clause: Node<'_>) -> bool {
    if grammar.kind(clause) == "finally_clause" {
        return true;
    }
    if grammar.child(statement, "body") != Some(clause) {
        return false;
    }
    let mut cursor = statement.walk();
    let handled = statement.named_children(&mut cursor).any(|c| {
        matches!(
            grammar.kind(c),
            "except_clause" | "except_group_clause" | "catch_clause"
        )
    });
    !handled
}

/// Clauses that follow another in their statement: from where one starts, a name assigned in
/// an earlier clause may not have been (`Restore`).
const CLAUSES: &[&str] = &[
    "else_clause",
    "elif_clause",
    "except_clause",
    "except_group_clause",
    "catch_clause",
    "finally_clause",
    "switch_case",
    "switch_default",
    "case_clause",
];

/// The name a member or subscript chain starts at (`o` of `o.a[0]`), if it starts at one.
fn base_name<'t>(grammar: &Grammar, node: Node<'t>) -> Option<Node<'t>> {
    let mut current = node;
    for _ in 0..64 {
        current = match grammar.kind(current) {
            "identifier" => return Some(current),
            "member_expression" | "subscript_expression" | "attribute" => {
                grammar.child(current, "object")?
            }
            "subscript" => grammar.child(current, "value")?,
            "parenthesized_expression" | "non_null_expression" => current.named_child(0)?,
            _ => return None,
        };
    }
    None
}

/// Python names declared `global` (true) or `nonlocal` (false), by the start byte of the
/// function declaring them.
type Declared<'a> = HashMap<(usize, &'a str), bool>;

/// Most `global` and `nonlocal` names recorded per snippet (`Declared`); past it a name
/// declared so is local to its function (what it is given there reads as unknown past it:
/// `bind` of a name whose scope is cut).
const MAX_DECLARED: usize = 4096;

/// Record the names a `global` or `nonlocal` statement (`node`) declares.
fn declare<'a>(
    grammar: &Grammar,
    code: &'a str,
    node: Node<'_>,
    ancestors: &[Node<'_>],
    declared: &mut Declared<'a>,
) {
    let global = match grammar.kind(node) {
        "global_statement" => true,
        "nonlocal_statement" => false,
        _ => return,
    };
    let Some(function) = ancestors
        .iter()
        .rev()
        .find(|a| is_function(grammar.kind(**a)))
    else {
        return;
    };
    let mut cursor = node.walk();
    for name in node.named_children(&mut cursor) {
        if declared.len() < MAX_DECLARED && grammar.kind(name) == "identifier" {
            declared.insert((function.start_byte(), &code[name.byte_range()]), global);
        }
    }
}

/// Where a Python assignment (`node`) to a name declared `global` or `nonlocal` in its
/// function holds (the module's end, or the enclosing function's) and how many functions it
/// is made across (each a branch: it may run later, or never).
fn declared_scope(
    grammar: &Grammar,
    code: &str,
    node: Node<'_>,
    kind: &str,
    ancestors: &[Node<'_>],
    declared: &Declared,
) -> Option<(usize, usize)> {
    let target = match kind {
        "assignment" | "augmented_assignment" => grammar.child(node, "left")?,
        "named_expression" => grammar.child(node, "name")?,
        _ => return None,
    };
    if grammar.kind(target) != "identifier" {
        return None;
    }
    let mut functions = ancestors
        .iter()
        .rev()
        .filter(|a| is_function(grammar.kind(**a)));
    let function = functions.next()?;
    let global = *declared.get(&(function.start_byte(), &code[target.byte_range()]))?;
    if global {
        Some((usize::MAX, usize::MAX))
    } else {
        // `nonlocal`: the enclosing function's name (a function in a function always has one).
        Some((functions.next().map_or(usize::MAX, |f| f.end_byte()), 1))
    }
}

/// Record where names get bound: declarations and assignments (with their value), loop
/// variables (each element of what they iterate: `for (const i of r.items)`, `for i in xs`,
/// a comprehension's `for`), the first parameter of a function passed to a method
/// (`r.items.map(i => ...)`, each element of the receiver) or, in Python, to a function with
/// one other positional argument (`map(lambda i: ..., xs)`), the other function parameters
/// (bound to something unknown where they are introduced), function declarations, and what
/// adds to a name's value (`s += v`, `o.k = v`, `xs.push(v)`). `ancestors` are `node`'s.
fn binding_sites<'t>(
    grammar: &'static Grammar,
    code: &str,
    lang: Lang,
    node: Node<'t>,
    ancestors: &[Node<'t>],
    declared: &Declared,
    sites: &mut Vec<Site<'t>>,
) {
    let kind = grammar.kind(node);
    let python = lang.is_python();
    // A Python name declared `global` or `nonlocal` in its function: assigned there, it is the
    // module's or the enclosing function's (`declared_scope`).
    let outer = if python {
        declared_scope(grammar, code, node, kind, ancestors, declared)
    } else {
        None
    };
    let cross = outer.map_or(0, |(_, cross)| cross);
    let site = |position: usize,
                pattern: Node<'t>,
                value: Option<Node<'t>>,
                how: How,
                scope_end: Option<usize>,
                sites: &mut Vec<Site<'t>>| {
        let branches = match scope_end {
            // A declaration is new where it is made; an assignment may replace what was bound
            // before a branch (in Python, any assignment but a function's first).
            Some(_) if !python => Branches::default(),
            _ if how == How::Each => Branches::default(),
            _ => branches(grammar, lang, node, ancestors, cross),
        };
        sites.push(Site {
            position,
            pattern,
            value,
            how,
            scope_end,
            branches,
        });
    };
    // A Python name assigned is local to its function; a JS one holds as far as what it
    // replaces.
    let assigned = || match outer {
        Some((end, _)) => Some(end),
        None => python.then(|| function_end(grammar, ancestors)),
    };
    // `left = right`, `left += right`: a name or a pattern takes the value, a member or a
    // subscript adds it to the name it starts at.
    let assignment = |add: bool, sites: &mut Vec<Site<'t>>| {
        let (Some(left), right) = (grammar.child(node, "left"), grammar.child(node, "right"))
        else {
            return;
        };
        match grammar.kind(left) {
            "member_expression" | "subscript_expression" | "attribute" | "subscript" => {
                if let Some(name) = base_name(grammar, left) {
                    site(node.end_byte(), name, right, How::Add, None, sites);
                }
            }
            _ if add => site(node.end_byte(), left, right, How::Add, assigned(), sites),
            _ => site(node.end_byte(), left, right, How::Value, assigned(), sites),
        }
    };
    // Parameters, unknown from where they are introduced to the end of their function.
    let unknown = |pattern: Option<Node<'t>>, scope_end: usize, sites: &mut Vec<Site<'t>>| {
        if let Some(pattern) = pattern {
            site(
                node.start_byte(),
                pattern,
                None,
                How::Value,
                Some(scope_end),
                sites,
            );
        }
    };
    let parent_end = ancestors.last().map_or(usize::MAX, |a| a.end_byte());
    // `function f() {...}`, `def f(): ...`: from its end, `f` is the function (a call of it
    // reads what it returns).
    let function_site = |scope_end: usize, sites: &mut Vec<Site<'t>>| {
        if let Some(pattern) = grammar.child(node, "name") {
            site(
                node.end_byte(),
                pattern,
                Some(node),
                How::Value,
                Some(scope_end),
                sites,
            );
        }
    };
    // `for x in/of value`: from the loop's start, `x` is each element of `value`.
    let each = |pattern: Option<Node<'t>>, scope_end: usize, sites: &mut Vec<Site<'t>>| {
        if let Some(pattern) = pattern {
            let value = grammar.child(node, "right");
            site(
                node.start_byte(),
                pattern,
                value,
                How::Each,
                Some(scope_end),
                sites,
            );
        }
    };
    // `xs.push(v)`, `d.update(v)`: adds the call's arguments to `xs`.
    if matches!(kind, "call_expression" | "call") {
        let function = grammar.child(node, "function");
        let method = function.and_then(|f| match grammar.kind(f) {
            "member_expression" => grammar.child(f, "property"),
            "attribute" => grammar.child(f, "attribute"),
            _ => None,
        });
        let receiver = function
            .and_then(|f| grammar.child(f, "object"))
            .and_then(|o| base_name(grammar, o));
        if let (Some(method), Some(receiver)) = (method, receiver) {
            if ADDING_METHODS.contains(&&code[method.byte_range()]) {
                let arguments = grammar.child(node, "arguments");
                site(node.end_byte(), receiver, arguments, How::Add, None, sites);
            }
        }
    }
    if python {
        match kind {
            "assignment" => assignment(false, sites),
            "augmented_assignment" => assignment(true, sites),
            "named_expression" => {
                if let Some(name) = grammar.child(node, "name") {
                    let value = grammar.child(node, "value");
                    site(node.end_byte(), name, value, How::Value, assigned(), sites);
                }
            }
            "for_statement" => each(
                grammar.child(node, "left"),
                function_end(grammar, ancestors),
                sites,
            ),
            // A comprehension's body comes before its `for`: its variables hold from the
            // comprehension's start to its end.
            "list_comprehension"
            | "set_comprehension"
            | "dictionary_comprehension"
            | "generator_expression" => {
                let mut cursor = node.walk();
                for clause in node.named_children(&mut cursor) {
                    if grammar.kind(clause) == "for_in_clause" {
                        if let Some(left) = grammar.child(clause, "left") {
                            site(
                                node.start_byte(),
                                left,
                                grammar.child(clause, "right"),
                                How::Each,
                                Some(node.end_byte()),
                                sites,
                            );
                        }
                    }
                }
            }
            "parameters" | "lambda_parameters" => unknown(Some(node), parent_end, sites),
            // `with open(p) as r:`, `except E as r:`: `r` is what the statement gives, no
            // step's output (before, `r` still read the step it was bound to).
            "as_pattern" => {
                if let Some(alias) = grammar.child(node, "alias") {
                    site(node.end_byte(), alias, None, How::Value, assigned(), sites);
                }
            }
            // `import r`, `import a.b` (binds `a`), `import x as r`, `from m import r`, `from
            // m import x as r`: the name is a module or what it gives, no step's output; `del
            // r` unbinds it. Before, `r` still read the step it was bound to
            // (docs/normalization.md, Steps).
            "import_statement" | "import_from_statement" => {
                let mut cursor = node.walk();
                let names: Vec<Node<'t>> =
                    node.children_by_field_name("name", &mut cursor).collect();
                for name in names {
                    let bound = match grammar.kind(name) {
                        "aliased_import" => grammar.child(name, "alias"),
                        "dotted_name" => name.named_child(0),
                        _ => None,
                    };
                    if let Some(bound) = bound.filter(|b| grammar.kind(*b) == "identifier") {
                        site(node.end_byte(), bound, None, How::Value, assigned(), sites);
                    }
                }
            }
            "delete_statement" => {
                let mut cursor = node.walk();
                let mut targets: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
                if let [list] = targets[..] {
                    if grammar.kind(list) == "expression_list" {
                        targets = list.named_children(&mut cursor).collect();
                    }
                }
                for target in targets {
                    if grammar.kind(target) == "identifier" {
                        site(node.end_byte(), target, None, How::Value, assigned(), sites);
                    }
                }
            }
            "function_definition" => function_site(function_end(grammar, ancestors), sites),
            "call" => callback_sites(grammar, code, lang, node, sites),
            _ => {}
        }
    } else {
        match kind {
            "variable_declarator" => {
                let var = ancestors
                    .last()
                    .is_some_and(|a| grammar.kind(*a) == "variable_declaration");
                let scope_end = if var {
                    function_end(grammar, ancestors)
                } else {
                    block_end(grammar, ancestors)
                };
                if let Some(name) = grammar.child(node, "name") {
                    let value = grammar.child(node, "value");
                    site(
                        node.end_byte(),
                        name,
                        value,
                        How::Value,
                        Some(scope_end),
                        sites,
                    );
                }
            }
            "assignment_expression" => assignment(false, sites),
            "augmented_assignment_expression" => assignment(true, sites),
            // `for (k in o)` takes o's keys: derived from `o`, no element of it.
            "for_in_statement" => {
                let keys = grammar
                    .child(node, "operator")
                    .is_some_and(|op| op.kind() == "in");
                let left = grammar.child(node, "left");
                if keys {
                    if let Some(pattern) = left {
                        let value = grammar.child(node, "right");
                        site(
                            node.start_byte(),
                            pattern,
                            value,
                            How::Value,
                            Some(node.end_byte()),
                            sites,
                        );
                    }
                } else {
                    each(left, node.end_byte(), sites);
                }
            }
            "formal_parameters" => unknown(Some(node), parent_end, sites),
            "function_declaration" | "generator_function_declaration" => {
                function_site(block_end(grammar, ancestors), sites)
            }
            "arrow_function" | "catch_clause" => {
                unknown(grammar.child(node, "parameter"), node.end_byte(), sites)
            }
            "call_expression" => callback_sites(grammar, code, lang, node, sites),
            _ => {}
        }
    }
}

/// The first parameter of each function passed to the call `node` takes each element of what
/// the call iterates: a method's receiver (`r.items.map(i => ...)`, `xs.forEach(...)`), or in
/// Python the call's one other positional argument (`map(lambda i: ..., xs)`). Its site is
/// placed at the parameter's end, after the function's own sites (every parameter unknown).
fn callback_sites<'t>(
    grammar: &'static Grammar,
    code: &str,
    lang: Lang,
    node: Node<'t>,
    sites: &mut Vec<Site<'t>>,
) {
    let (Some(function), Some(arguments)) = (
        grammar.child(node, "function"),
        grammar.child(node, "arguments"),
    ) else {
        return;
    };
    let is_function = |n: Node<'_>| {
        matches!(
            grammar.kind(n),
            "arrow_function" | "function_expression" | "function" | "lambda"
        )
    };
    let mut cursor = arguments.walk();
    // A function passed by keyword (`sorted(xs, key=lambda i: ...)`) is passed too.
    let args: Vec<Node<'t>> = arguments
        .named_children(&mut cursor)
        .filter(|c| !c.is_extra())
        .map(|c| match grammar.kind(c) {
            "keyword_argument" => grammar
                .child(c, "value")
                .filter(|v| is_function(*v))
                .unwrap_or(c),
            _ => c,
        })
        .collect();
    if !args.iter().any(|a| is_function(*a)) {
        return;
    }
    let iterated = match grammar.kind(function) {
        "member_expression" | "attribute" => grammar.child(function, "object"),
        "identifier" if lang.is_python() => {
            let mut others = args
                .iter()
                .filter(|a| !is_function(**a) && grammar.kind(**a) != "keyword_argument");
            match (others.next(), others.next()) {
                (Some(one), None) => Some(*one),
                _ => None,
            }
        }
        _ => None,
    };
    let Some(iterated) = iterated else {
        return;
    };
    // A promise's `then(f)` gives `f` the value itself, its rejection handlers (`then`'s
    // second function, `catch`) an error: no output (docs/normalization.md, Steps).
    let promise = match promise_method(grammar, code, lang, function) {
        Some("then") => true,
        Some(_) => return,
        None => false,
    };
    for (i, callback) in args.into_iter().enumerate() {
        if !is_function(callback) || (promise && i > 0) {
            continue;
        }
        let first = match grammar.child(callback, "parameter") {
            Some(single) => Some(single),
            None => grammar.child(callback, "parameters").and_then(|list| {
                let mut c = list.walk();
                let first = list.named_children(&mut c).find(|p| !p.is_extra());
                first
            }),
        };
        let pattern = first.and_then(|p| match grammar.kind(p) {
            "required_parameter" | "optional_parameter" => grammar.child(p, "pattern"),
            "identifier" | "object_pattern" | "array_pattern" => Some(p),
            _ => None,
        });
        if let Some(pattern) = pattern {
            sites.push(Site {
                position: pattern.end_byte(),
                pattern,
                value: Some(iterated),
                how: if promise { How::Value } else { How::Each },
                scope_end: Some(callback.end_byte()),
                branches: Branches::default(),
            });
        }
    }
}

impl<'a, 't> Reader<'a, 't> {
    fn text(&self, node: Node<'_>) -> &'a str {
        &self.code[node.byte_range()]
    }

    fn kind(&self, node: Node<'_>) -> &'static str {
        self.grammar.kind(node)
    }

    /// Bind every name `pattern` introduces: a plain name gets `binding`, a destructured one
    /// the binding's sources with the path it was taken at.
    fn bind(
        &mut self,
        pattern: Node<'t>,
        at: usize,
        binding: &Binding,
        path: String,
        depth: usize,
    ) {
        if depth > 16 {
            return;
        }
        let at_path = |suffix: &str| binding.at_path(&[format!("{path}{suffix}")]);
        let kind = self.kind(pattern);
        let mut cursor = pattern.walk();
        let children: Vec<Node<'t>> = pattern.named_children(&mut cursor).collect();
        match kind {
            "identifier" | "shorthand_property_identifier_pattern" => {
                let name = self.text(pattern);
                self.keep(name, at, at_path(""));
            }
            // `obj.x = ...` binds no name.
            "member_expression" | "subscript_expression" | "attribute" | "subscript" => {}
            "object_pattern" => {
                for child in children {
                    match self.kind(child) {
                        "shorthand_property_identifier_pattern" => {
                            let key = self.text(child);
                            self.keep(key, at, at_path(&format!(".{key}")));
                        }
                        // `{x = 5}`: `x` is `.x`, or its default when that is undefined.
                        "object_assignment_pattern" => {
                            if let Some(left) = self.grammar.child(child, "left") {
                                let key = self.text(left);
                                let inner = at_path(&format!(".{key}"));
                                self.bind(left, at, &inner, String::new(), depth + 1);
                            }
                        }
                        "pair_pattern" => {
                            let key = self.grammar.child(child, "key").map(|k| self.key_text(k));
                            if let (Some(key), Some(value)) =
                                (key, self.grammar.child(child, "value"))
                            {
                                let inner = at_path(&format!(".{key}"));
                                self.bind(value, at, &inner, String::new(), depth + 1);
                            }
                        }
                        // `{a, ...rest}`: the other keys, read from the whole value.
                        "rest_pattern" => {
                            self.bind(child, at, &at_path(""), String::new(), depth + 1)
                        }
                        _ => self.bind(child, at, &Binding::Other, String::new(), depth + 1),
                    }
                }
            }
            "array_pattern" | "pattern_list" | "tuple_pattern" | "list_pattern" => {
                for (i, child) in children.into_iter().enumerate() {
                    let inner = match binding {
                        // `[a, ...rest]`, `a, *rest = ...`: the other elements, read from the
                        // whole value.
                        _ if matches!(self.kind(child), "rest_pattern" | "list_splat_pattern") => {
                            at_path("")
                        }
                        // Element by element: a name past the last element holds nothing read.
                        Binding::Elements { items, .. } if path.is_empty() => {
                            items.get(i).cloned().unwrap_or(Binding::Other)
                        }
                        _ => at_path(&format!("[{i}]")),
                    };
                    self.bind(child, at, &inner, String::new(), depth + 1);
                }
            }
            // `[x = 5]`, `{y: x = 5}`: the name is what the position holds, or its default
            // (a parameter's default: what the caller passes, unknown as the parameter).
            "assignment_pattern" | "object_assignment_pattern" => {
                if let Some(left) = self.grammar.child(pattern, "left") {
                    self.bind(left, at, &at_path(""), String::new(), depth + 1);
                }
            }
            "rest_pattern" | "list_splat_pattern" => {
                for child in children {
                    self.bind(child, at, binding, path.clone(), depth + 1);
                }
            }
            // Parameter lists and anything else: every name in them is unknown from here on.
            _ => {
                for child in children {
                    let inner = match self.kind(child) {
                        "default_parameter" | "typed_default_parameter" => {
                            self.grammar.child(child, "name")
                        }
                        "required_parameter" | "optional_parameter" => {
                            self.grammar.child(child, "pattern")
                        }
                        "typed_parameter" => {
                            let mut c = child.walk();
                            let first = child
                                .named_children(&mut c)
                                .find(|n| self.kind(*n) != "type");
                            first
                        }
                        _ => Some(child),
                    };
                    if let Some(inner) = inner {
                        self.bind(inner, at, &Binding::Other, String::new(), depth + 1);
                    }
                }
            }
        }
    }

    /// Bind `name` to `value` from `at` to the end of the site's scope (`site_scope`), or to
    /// something unknown past `MAX_SNIPPET_SOURCES`. In a branch, when the name was bound
    /// before it and the binding outlives it, the name holds past the branch what it held
    /// before or what the branch gives it (`Entry::joined`).
    fn keep(&mut self, name: &'a str, at: usize, value: Binding) {
        let branches = std::mem::take(&mut self.site_scope.1);
        // Joined past only some of its branches, a clause after its own could read it.
        let value = if branches.too_deep {
            Binding::Other
        } else {
            self.counted(value)
        };
        let end = match self.site_scope.0 {
            Some(end) => end,
            None => self.entry(name, at).map_or(usize::MAX, |e| e.end),
        };
        insert_entry(
            self.bindings.entry(name).or_default(),
            at,
            end,
            value.clone(),
            false,
            false,
        );
        // The next clause (`else`, `except`, the next `case`) holds what the name held before
        // the statement (or the clause), and what the assignment gave when it may run after.
        for restore in &branches.restores {
            let Some(&at) = self.next_clauses.get(&restore.clause) else {
                continue;
            };
            if end <= at {
                continue;
            }
            let list = self.bindings.entry(name).or_default();
            let upto = list.partition_point(|e| e.position < restore.before);
            let held = list[..upto]
                .iter()
                .rev()
                .take(MAX_SCOPE_SKIPS)
                .find(|e| restore.before < e.end)
                .map_or(Binding::Other, |e| e.binding.clone());
            let held = if restore.only_value {
                value.clone()
            } else if restore.with_value {
                union(&held, &value)
            } else {
                held
            };
            let list = self.bindings.entry(name).or_default();
            let from = list.partition_point(|e| e.position < at);
            let to = list.partition_point(|e| e.position <= at);
            let same = (from..to).find(|&i| list[i].restore);
            let held = match same {
                Some(i) if !restore.only_value => union(&list[i].binding, &held),
                _ => held,
            };
            let held = self.counted(held);
            let list = self.bindings.entry(name).or_default();
            match same {
                Some(i) => list[i].binding = held,
                None => insert_entry(list, at, end, held, false, true),
            }
        }
        for &(start, branch_end, definite) in &branches.joins {
            if end <= branch_end {
                continue;
            }
            if definite {
                // what the branch gave, alone: the latest assignment in it is read past it
                let value = self.counted(value.clone());
                let list = self.bindings.entry(name).or_default();
                let from = list.partition_point(|e| e.position < branch_end);
                let to = list.partition_point(|e| e.position <= branch_end);
                match (from..to).find(|&i| list[i].joined) {
                    Some(i) => list[i].binding = value,
                    None => insert_entry(list, branch_end, end, value, true, false),
                }
                continue;
            }
            let list = self.bindings.entry(name).or_default();
            let from = list.partition_point(|e| e.position < branch_end);
            let to = list.partition_point(|e| e.position <= branch_end);
            let joined = (from..to).find(|&i| list[i].joined);
            let before = match joined {
                Some(i) => Some(&list[i].binding),
                None => {
                    let upto = list.partition_point(|e| e.position < start);
                    list[..upto]
                        .iter()
                        .rev()
                        .take(MAX_SCOPE_SKIPS)
                        .find(|e| start < e.end)
                        .map(|e| &e.binding)
                }
            };
            let Some(before) = before else {
                continue;
            };
            let merged = union(before, &value);
            let merged = self.counted(merged);
            let list = self.bindings.entry(name).or_default();
            match joined {
                Some(i) => list[i].binding = merged,
                None => insert_entry(list, branch_end, end, merged, true, false),
            }
        }
        self.site_scope.1 = branches;
    }

    /// `value`, counted against `MAX_SNIPPET_SOURCES`: unknown past it.
    fn counted(&mut self, value: Binding) -> Binding {
        let size = value.size();
        if size <= self.sources_left {
            self.sources_left -= size;
            value
        } else {
            Binding::Other
        }
    }

    /// An object key or subscript as written: identifiers as is, strings decoded.
    fn key_text(&self, key: Node<'_>) -> String {
        let text = self.text(key);
        if self.kind(key) == "string" {
            decode_string(self.lang, text).unwrap_or_else(|| text.to_owned())
        } else {
            text.to_owned()
        }
    }

    /// What a value read as a whole binds a name to.
    fn value_binding(&mut self, value: Node<'t>) -> Binding {
        self.budget = MAX_ARGUMENT_NODES;
        let mut found = Found::default();
        self.read(value, value.start_byte(), &mut found, 0);
        match found.kind() {
            ArgKind::Reference => Binding::Steps(found.sources),
            ArgKind::Parameter => Binding::Params(found.params),
            _ => Binding::Other,
        }
    }

    /// The elements of a value that is a sequence written element by element (through
    /// `await` and parentheses): an array, list, tuple or `x, y`, the array passed to
    /// `Promise.all`, the awaitables passed to `gather` (`asyncio.gather`). `None` with a
    /// spread (positions unknown) or past `MAX_ELEMENTS`.
    fn elements(&self, value: Node<'t>) -> Option<Vec<Node<'t>>> {
        let mut node = value;
        while matches!(
            self.kind(node),
            "await_expression" | "await" | "parenthesized_expression"
        ) {
            node = node.named_child(0)?;
        }
        let list = match self.kind(node) {
            "array" | "list" | "tuple" | "expression_list" => node,
            "call_expression" | "call" => {
                let function = self.grammar.child(node, "function")?;
                let name = match self.kind(function) {
                    "member_expression" => self.grammar.child(function, "property"),
                    "attribute" => self.grammar.child(function, "attribute"),
                    "identifier" => Some(function),
                    _ => None,
                }
                .map(|n| self.text(n))?;
                let arguments = self.grammar.child(node, "arguments")?;
                match name {
                    // `allSettled` wraps each output (`{status, value}`): still one per call.
                    "all" | "allSettled"
                        if matches!(self.text(function), "Promise.all" | "Promise.allSettled") =>
                    {
                        let mut cursor = arguments.walk();
                        let mut args = arguments
                            .named_children(&mut cursor)
                            .filter(|c| !c.is_extra());
                        match (args.next(), args.next()) {
                            (Some(array), None) if self.kind(array) == "array" => array,
                            _ => return None,
                        }
                    }
                    "gather" if self.lang.is_python() => arguments,
                    _ => return None,
                }
            }
            _ => return None,
        };
        let mut cursor = list.walk();
        let mut elements = Vec::new();
        for child in list.named_children(&mut cursor) {
            match self.kind(child) {
                _ if child.is_extra() => {}
                // `gather(..., return_exceptions=True)`: an option, not an element.
                "keyword_argument" => {}
                "spread_element" | "list_splat" | "dictionary_splat" => return None,
                _ if elements.len() == MAX_ELEMENTS => return None,
                _ => elements.push(child),
            }
        }
        Some(elements)
    }

    fn lookup(&self, name: &str, at: usize) -> Option<&Binding> {
        self.entry(name, at).map(|e| &e.binding)
    }

    /// The binding of `name` a use at `at` reads: the latest before it still in scope there,
    /// passing over at most `MAX_SCOPE_SKIPS` out of scope.
    fn entry(&self, name: &str, at: usize) -> Option<&Entry> {
        let list = self.bindings.get(name)?;
        let upto = list.partition_point(|e| e.position <= at);
        list[..upto]
            .iter()
            .rev()
            .take(MAX_SCOPE_SKIPS)
            .find(|e| at < e.end)
    }

    /// The arguments of a tool call, from where `which` says they are (`tree::tool_call`): an
    /// object (or dict) passed alone is read key by key.
    fn arguments(&mut self, call: Node<'t>, which: &ToolArguments<'t>) -> Vec<RawArgument> {
        let Some(args) = self.grammar.child(call, "arguments") else {
            return Vec::new();
        };
        let mut cursor = args.walk();
        let mut items: Vec<Node<'t>> = args
            .named_children(&mut cursor)
            .filter(|c| !c.is_extra())
            .collect();
        match which {
            ToolArguments::AfterName if !items.is_empty() => {
                items.remove(0);
            }
            ToolArguments::Node(node) => items = vec![*node],
            ToolArguments::Empty => items.clear(),
            _ => {}
        }
        let mut named: Vec<(String, Option<Node<'t>>)> = Vec::new();
        let positional = items
            .iter()
            .filter(|n| self.kind(**n) != "keyword_argument")
            .count();
        for (position, item) in items.into_iter().enumerate() {
            match self.kind(item) {
                "object" | "dictionary" if positional == 1 => {
                    let mut c = item.walk();
                    for entry in item.named_children(&mut c).filter(|c| !c.is_extra()) {
                        match self.kind(entry) {
                            "pair" => {
                                let key = self.grammar.child(entry, "key");
                                let name = key.map(|k| self.key_text(k)).unwrap_or_default();
                                named.push((name, self.grammar.child(entry, "value")));
                            }
                            "shorthand_property_identifier" => {
                                named.push((self.text(entry).to_owned(), Some(entry)));
                            }
                            "spread_element" | "dictionary_splat" => {
                                named.push(("...".to_owned(), Some(entry)));
                            }
                            _ => named.push((self.text(entry).to_owned(), None)),
                        }
                    }
                }
                "keyword_argument" => {
                    let name = self
                        .grammar
                        .child(item, "name")
                        .map(|n| self.text(n).to_owned())
                        .unwrap_or_default();
                    named.push((name, self.grammar.child(item, "value")));
                }
                "spread_element" | "list_splat" | "dictionary_splat" => {
                    named.push(("...".to_owned(), Some(item)));
                }
                _ => named.push((position.to_string(), Some(item))),
            }
        }
        named.truncate(MAX_STEP_ARGUMENTS);
        let at = call.start_byte();
        named
            .into_iter()
            .map(|(name, value)| {
                let mut found = Found::default();
                match value {
                    Some(value) => {
                        self.budget = MAX_ARGUMENT_NODES;
                        self.read(value, at, &mut found, 0);
                    }
                    None => found.unknown = true,
                }
                RawArgument {
                    name,
                    kind: found.kind(),
                    params: found.params,
                    sources: found.sources,
                }
            })
            .collect()
    }

    /// Classify what `node` (read at byte `at`) is made of into `found`.
    fn read(&mut self, node: Node<'t>, at: usize, found: &mut Found, depth: usize) {
        if self.budget == 0 || depth > 64 {
            found.unknown = true;
            return;
        }
        self.budget -= 1;
        if node.is_extra() {
            return;
        }
        if let Some(&(end, index)) = self.params.get(&node.start_byte()) {
            if end == node.end_byte() {
                found.add_param(index);
                return;
            }
        }
        let kind = self.kind(node);
        match kind {
            "identifier" | "shorthand_property_identifier" => {
                self.read_name(self.text(node), at, &[], found);
            }
            "call_expression" | "call" => {
                if let Some(&step) = self.calls.get(&(node.start_byte(), node.end_byte())) {
                    found.add_source(step, String::new());
                } else {
                    self.read_call(node, at, found, depth);
                }
            }
            "member_expression" | "attribute" | "subscript_expression" | "subscript" => {
                if !self.read_path(node, at, found) {
                    // Not a path from a name or a step: read the object and any index.
                    let object = self
                        .grammar
                        .child(node, "object")
                        .or_else(|| self.grammar.child(node, "value"));
                    for part in [
                        object,
                        self.grammar.child(node, "index"),
                        self.grammar.child(node, "subscript"),
                    ]
                    .into_iter()
                    .flatten()
                    {
                        self.read(part, at, found, depth + 1);
                    }
                }
            }
            // A function is what it returns to whoever calls it: `xs.map(i => mcp.b({id: i}))`
            // given to a call reads step b's output (docs/normalization.md, Steps).
            _ if is_function(kind) && kind != "method_definition" => {
                found.unknown = true;
                self.read_returns(node, found, depth);
            }
            // A spread passes keys not written here: unknown, and a reference if it reads a step.
            "spread_element" | "list_splat" | "dictionary_splat" => {
                found.unknown = true;
                self.read_children(node, at, found, depth);
            }
            "true" | "false" | "null" | "undefined" | "none" | "string" | "number" | "integer"
            | "float" | "template_string"
                if node.named_child_count() == 0 => {}
            _ if node.named_child_count() == 0 => {
                // A leaf that is not a literal (`this`, `super`...): not known here.
                if !matches!(
                    kind,
                    "string_fragment"
                        | "string_content"
                        | "string_start"
                        | "string_end"
                        | "escape_sequence"
                        | "property_identifier"
                        | "comment"
                        | "regex"
                        | "regex_pattern"
                        | "type_identifier"
                        | "predefined_type"
                ) {
                    found.unknown = true;
                }
            }
            // A comprehension's `for i in xs` reads `xs`; `i` is bound, not read.
            "for_in_clause" => {
                if let Some(right) = self.grammar.child(node, "right") {
                    self.read(right, at, found, depth + 1);
                }
            }
            "pair" | "keyword_argument" => {
                if let Some(value) = self.grammar.child(node, "value") {
                    self.read(value, at, found, depth + 1);
                }
            }
            _ => self.read_children(node, at, found, depth),
        }
    }

    /// What the function `function` returns: its expression body, or the value of each
    /// `return` in its body (not in a function nested there), each read where it is written.
    /// The body's nodes walked count against the argument's budget.
    fn read_returns(&mut self, function: Node<'t>, found: &mut Found, depth: usize) {
        let Some(body) = self.grammar.child(function, "body") else {
            return;
        };
        if !matches!(self.kind(body), "statement_block" | "block") {
            self.read(body, body.start_byte(), found, depth + 1);
            return;
        }
        let mut returned: Vec<Node<'t>> = Vec::new();
        let mut stack = vec![body];
        while let Some(node) = stack.pop() {
            if self.budget == 0 {
                found.unknown = true;
                return;
            }
            self.budget -= 1;
            let mut cursor = node.walk();
            for child in node.named_children(&mut cursor) {
                match self.kind(child) {
                    "return_statement" => {
                        let mut c = child.walk();
                        let value = child.named_children(&mut c).find(|n| !n.is_extra());
                        returned.extend(value);
                    }
                    kind if is_function(kind) || kind.starts_with("class") => {}
                    _ => stack.push(child),
                }
            }
        }
        returned.sort_by_key(|n| n.start_byte());
        for value in returned {
            self.read(value, value.start_byte(), found, depth + 1);
        }
    }

    /// A call that is no step reads its arguments and, for a method (`r.items.map(f)`,
    /// `r["name"].upper()`), the value it is called on: a method's name is no data, so a path
    /// never names one (docs/normalization.md, Steps).
    fn read_call(&mut self, node: Node<'t>, at: usize, found: &mut Found, depth: usize) {
        let function = self.grammar.child(node, "function");
        let receiver = function.and_then(|f| match self.kind(f) {
            "member_expression" | "attribute" => self.grammar.child(f, "object"),
            _ => None,
        });
        let name = function.and_then(|f| match self.kind(f) {
            "member_expression" => self.grammar.child(f, "property"),
            "attribute" => self.grammar.child(f, "attribute"),
            "identifier" => Some(f),
            _ => None,
        });
        let tests = name.is_some_and(|n| TESTING_CALLS.contains(&self.text(n)));
        // `p.then(f)` is what `f` returns (given `p`'s value: `callback_sites`), not `p`.
        let then = function.is_some_and(|f| {
            promise_method(self.grammar, self.code, self.lang, f) == Some("then")
                && self
                    .grammar
                    .child(node, "arguments")
                    .and_then(|a| {
                        let mut c = a.walk();
                        let first = a.named_children(&mut c).find(|n| !n.is_extra());
                        first
                    })
                    .is_some_and(|first| is_function(self.kind(first)))
        });
        let mut cursor = node.walk();
        let children: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
        for child in children {
            match receiver {
                Some(_) if then && Some(child) == function => {}
                Some(receiver) if Some(child) == function => {
                    self.read(receiver, at, found, depth + 1)
                }
                _ if self.kind(child) == "arguments" || self.kind(child) == "argument_list" => {
                    let mut c = child.walk();
                    let arguments: Vec<Node<'t>> = child.named_children(&mut c).collect();
                    for argument in arguments {
                        // A function given to a call that only tests or orders the values
                        // (`filter`, `sort`, `key=`) returns no data of the result.
                        let value = match self.kind(argument) {
                            "keyword_argument" => self.grammar.child(argument, "value"),
                            _ => Some(argument),
                        };
                        let keyed = self.kind(argument) == "keyword_argument"
                            && self
                                .grammar
                                .child(argument, "name")
                                .is_some_and(|n| self.text(n) == "key");
                        if value.is_some_and(|v| is_function(self.kind(v))) && (tests || keyed) {
                            found.unknown = true;
                        } else {
                            self.read(argument, at, found, depth + 1);
                        }
                    }
                }
                _ => self.read(child, at, found, depth + 1),
            }
        }
    }

    /// What a loop's or a callback's variable holds: one element of `value`, `[*]` after
    /// what it reads (`for (const i of r.items)` and `r.items.filter(f).map(i => ...)` read
    /// `.items[*]`), or one of the values of a sequence written out (`for (const x of [a, b])`,
    /// a name bound to one: `Binding::Elements`).
    fn element_binding(&mut self, value: Node<'t>) -> Binding {
        let mut node = value;
        while matches!(
            self.kind(node),
            "await_expression" | "await" | "parenthesized_expression"
        ) {
            match node.named_child(0) {
                Some(inner) => node = inner,
                None => break,
            }
        }
        // A name bound element by element (`const rs = await Promise.all([...])`) holds
        // those elements: each one is what an element reads, not a part of it.
        if self.kind(node) == "identifier" {
            if let Some(Binding::Elements { whole, .. }) =
                self.lookup(self.text(node), value.start_byte())
            {
                return whole.as_ref().clone();
            }
        }
        let whole = self.value_binding(value);
        match self.kind(node) {
            "array" | "list" | "tuple" | "expression_list" | "set" => whole,
            _ => whole.at_path(&["[*]".to_owned()]),
        }
    }

    fn read_children(&mut self, node: Node<'t>, at: usize, found: &mut Found, depth: usize) {
        let mut cursor = node.walk();
        let children: Vec<Node<'t>> = node.named_children(&mut cursor).collect();
        for child in children {
            self.read(child, at, found, depth + 1);
        }
    }

    /// What `name` reads at `at`, followed by `segments` (`[".a", "[0]"]`): a constant
    /// index first into a sequence bound element by element takes that element.
    fn read_name(&mut self, name: &str, at: usize, segments: &[String], found: &mut Found) {
        let Some(mut binding) = self.lookup(name, at) else {
            match name {
                "undefined" | "None" | "True" | "False" | "NaN" | "Infinity" => {}
                _ => found.unknown = true,
            }
            return;
        };
        let mut rest = segments;
        while let (Binding::Elements { items, .. }, Some(first)) = (binding, rest.first()) {
            let index = first
                .strip_prefix('[')
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<usize>().ok());
            match index.and_then(|i| items.get(i)) {
                Some(item) => {
                    binding = item;
                    rest = &rest[1..];
                }
                None => break,
            }
        }
        let read = match binding {
            Binding::Elements { whole, .. } => whole.as_ref(),
            other => other,
        };
        if read.size() > self.sources_left {
            found.unknown = true;
            return;
        }
        let read = read.at_path(rest);
        self.sources_left -= read.size();
        match read {
            Binding::Steps(sources) => {
                for s in sources {
                    found.add_source(s.step, s.path);
                }
            }
            Binding::Params(params) => {
                for index in params {
                    found.add_param(index);
                }
            }
            Binding::Other | Binding::Elements { .. } => found.unknown = true,
        }
    }

    /// `r1.a["b"][0]`: a path read from a name or a tool call. `false` when the chain does
    /// not start at one (the caller reads the parts instead).
    fn read_path(&mut self, node: Node<'t>, at: usize, found: &mut Found) -> bool {
        let mut segments: Vec<String> = Vec::new();
        let mut current = node;
        let mut computed: Vec<Node<'t>> = Vec::new();
        for _ in 0..64 {
            let kind = self.kind(current);
            let (object, segment) = match kind {
                "member_expression" | "attribute" => {
                    let field = if kind == "attribute" {
                        "attribute"
                    } else {
                        "property"
                    };
                    let Some(name) = self.grammar.child(current, field) else {
                        return false;
                    };
                    ("object", format!(".{}", self.text(name)))
                }
                "subscript_expression" | "subscript" => {
                    let (object, index) = if kind == "subscript" {
                        ("value", "subscript")
                    } else {
                        ("object", "index")
                    };
                    let Some(index) = self.grammar.child(current, index) else {
                        return false;
                    };
                    let segment = match self.kind(index) {
                        "string" => match decode_string(self.lang, self.text(index)) {
                            Some(key) => format!("[{}]", serde_json::Value::String(key)),
                            None => "[*]".to_owned(),
                        },
                        "number" | "integer" => format!("[{}]", self.text(index)),
                        _ => {
                            computed.push(index);
                            "[*]".to_owned()
                        }
                    };
                    (object, segment)
                }
                "parenthesized_expression"
                | "await_expression"
                | "await"
                | "as_expression"
                | "satisfies_expression"
                | "non_null_expression" => {
                    let Some(inner) = current.named_child(0) else {
                        return false;
                    };
                    current = inner;
                    continue;
                }
                _ => break,
            };
            segments.push(segment);
            let Some(next) = self.grammar.child(current, object) else {
                return false;
            };
            current = next;
        }
        segments.reverse();
        match self.kind(current) {
            "identifier" => self.read_name(self.text(current), at, &segments, found),
            "call_expression" | "call" => {
                match self.calls.get(&(current.start_byte(), current.end_byte())) {
                    Some(&step) => found.add_source(step, join_path("", &segments)),
                    None => return false,
                }
            }
            _ => return false,
        }
        // A computed index reads its own names too (`r2[r1.key]`).
        for index in computed {
            self.read(index, at, found, 1);
        }
        true
    }
}

/// Calls whose function arguments test or order values (their results hold the values
/// tested, not what the functions return): JS array methods, Python `filter`, `sorted`, `min`,
/// `max` (and any `key=` function).
const TESTING_CALLS: &[&str] = &[
    "filter",
    "find",
    "findIndex",
    "findLast",
    "findLastIndex",
    "some",
    "every",
    "sort",
    "toSorted",
    "forEach",
    "finally",
    "sorted",
    "min",
    "max",
];

/// The JS promise method (`then`, `catch`, `finally`) `function` names (`p.then`), if any.
fn promise_method(
    grammar: &Grammar,
    code: &str,
    lang: Lang,
    function: Node<'_>,
) -> Option<&'static str> {
    if lang.is_python() || grammar.kind(function) != "member_expression" {
        return None;
    }
    let property = grammar.child(function, "property")?;
    ["then", "catch", "finally"]
        .into_iter()
        .find(|m| *m == &code[property.byte_range()])
}

/// Whether a `kind` node is a function (an expression or a declaration).
fn is_function(kind: &str) -> bool {
    matches!(
        kind,
        "arrow_function"
            | "function_expression"
            | "function"
            | "lambda"
            | "function_declaration"
            | "generator_function_declaration"
            | "generator_function"
            | "function_definition"
            | "method_definition"
    )
}

/// Whether the children of a `kind` node (child of a `parent_kind` node) run in a loop or a
/// callback: loops and comprehensions, and functions passed as call arguments. A step there
/// may run several times, or later.
fn deferred_scope(kind: &str, parent_kind: &str) -> bool {
    match kind {
        "for_statement"
        | "for_in_statement"
        | "while_statement"
        | "do_statement"
        | "list_comprehension"
        | "dictionary_comprehension"
        | "set_comprehension"
        | "generator_expression" => true,
        "arrow_function" | "function_expression" | "function" | "lambda" => {
            matches!(
                parent_kind,
                "arguments" | "argument_list" | "keyword_argument"
            )
        }
        _ => false,
    }
}
