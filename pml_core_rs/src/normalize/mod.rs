//! Code normalization: the identity of a pattern.
//!
//! `normalize(code, language)` turns agent code into a readable template (literals replaced by
//! named placeholders), the parameters it took out, the tools it calls, a JSON Schema of its
//! inputs and `code_hash`, a SHA-256 over a canonical form that ignores literal values,
//! formatting, comments, local variable names and argument key order. The rules are a
//! contract (docs/normalization.md, pinned by tests/vectors/normalization.json): changing
//! what hashes alike requires bumping `NORMALIZER_VERSION`.

mod bindings;
mod canonical;
mod fallback;
mod grammar;
mod language;
mod literal;
mod naming;
mod prepare;
mod schema;
mod secrets;
mod steps;
mod tree;

use crate::error::{CoreError, CoreResult};

pub use language::{resolve as resolve_language, Lang, LanguageChoice};
pub use literal::JsonType;
pub use prepare::{prepare, prepare_many, CaptureInput, Prepared, MIN_SECRET_CHARS};
pub use secrets::{redact_name, redact_text};
pub use steps::{
    ArgKind, Step, StepArgument, StepSource, MAX_ARGUMENT_NODES, MAX_STEPS, MAX_STEP_ARGUMENTS,
};

/// Version of the normalization rules; hashed into every `code_hash`.
pub const NORMALIZER_VERSION: u32 = 2;
/// Largest input accepted, in UTF-8 bytes; larger input is an `InputTooLarge` error.
pub const MAX_INPUT_BYTES: usize = 4 * 1024 * 1024;
/// Deepest bracket nesting parsed; deeper code goes to the token-level fallback.
pub const MAX_BRACKET_NESTING: usize = 256;
/// Most parameters taken out of one snippet; literals after these stay code (hashed by
/// value, kept in the template as written), so a pattern's size follows what a user can read.
pub const MAX_PARAMS: usize = 256;
/// Longest placeholder base name (before any `_2` suffix), in bytes (names are ASCII).
pub const MAX_PARAM_NAME_BYTES: usize = 48;
/// What a secret literal becomes in `redacted_code` (and in the template, past `MAX_PARAMS`).
pub const REDACTED_LITERAL: &str = "\"[REDACTED]\"";
/// Deepest syntax tree walked; deeper code goes to the token-level fallback.
pub const MAX_TREE_DEPTH: usize = 1024;

/// One placeholder of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// `$PATH`, `$LIMIT_2`, `$READ_FILE_ARG0`, `$STR`...
    pub name: String,
    pub json_type: JsonType,
    /// The literal's decoded value as JSON text (`"\"a.json\""`, `5`, `-2.5`).
    pub value_json: String,
    /// Span of the literal in the input, in Unicode code points (Python `str` indices).
    pub start: usize,
    pub end: usize,
    /// The value looks like a credential; later layers store it only as `[REDACTED]`.
    pub secret: bool,
}

/// The result of normalizing one snippet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Normalized {
    pub language: String,
    pub template: String,
    pub code_hash: String,
    pub params: Vec<Param>,
    pub tool_calls: Vec<String>,
    pub parse_ok: bool,
    pub fallback_reason: String,
    pub schema_json: String,
    /// The input with every secret literal replaced by `REDACTED_LITERAL` and every token
    /// elsewhere (comments, f-strings, names) with a credential prefix, a JWT, a `Bearer` token
    /// or a PEM block by `[REDACTED]`: the only form of the code later layers may store.
    pub redacted_code: String,
    /// One step per tool call (up to `MAX_STEPS`), with its arguments and data flow
    /// (docs/normalization.md, Steps).
    pub steps: Vec<Step>,
}

/// A literal taken out of the code, before naming and secret detection.
pub(crate) struct RawParam {
    pub start: usize,
    pub end: usize,
    pub json_type: JsonType,
    pub value_json: String,
    pub string_value: Option<String>,
    /// The name its context gives it (key, keyword, variable, `callee_ARGn`), as written.
    pub context: Option<String>,
    /// The literal stayed code (past `MAX_PARAMS`, or a value that cannot be decoded exactly,
    /// such as a Python byte string) and is listed only because it is a secret, so that it is
    /// redacted in the template and the redacted code.
    pub overflow: bool,
    /// A sibling names the value as a credential although its own context does not: the key
    /// of a subscript assignment (`headers["Authorization"] = "..."`), an earlier string
    /// argument (`os.getenv("DB_PASSWORD", "...")`, `h.set("Authorization", "...")`), the
    /// left side of a default (`process.env.API_TOKEN || "..."`) (docs/normalization.md,
    /// Secrets). It flags the parameter without naming it.
    pub named_credential: bool,
    /// The literal text of an interpolated string that is a credential's value
    /// (`f"{prefix}..."`): always `overflow`, redacted as `[REDACTED]` inside the string's
    /// quotes (docs/normalization.md, Secrets).
    pub fragment: bool,
}

impl RawParam {
    /// The literal text `node` of an interpolated string listed as a secret `fragment`
    /// (always `overflow`: it stays code), flagged `named_credential` as its caller says.
    pub(crate) fn fragment(node: tree_sitter::Node<'_>, named_credential: bool) -> Self {
        RawParam {
            start: node.start_byte(),
            end: node.end_byte(),
            json_type: JsonType::String,
            value_json: String::new(),
            string_value: None,
            context: None,
            overflow: true,
            named_credential,
            fragment: true,
        }
    }
}

impl RawParam {
    /// The context name as UPPER_SNAKE, at most `MAX_PARAM_NAME_BYTES` long. Read from the
    /// context redacted as free text (`secrets::redact_text`): a key holding a credential (a
    /// URL with a password, an API key) names its placeholder `..._REDACTED_...`, never after
    /// the credential (docs/normalization.md, Secrets).
    fn context_name(&self) -> Option<String> {
        let context = secrets::redact_text(self.context.as_deref()?);
        let mut name = naming::upper_snake(&context)?;
        if name.len() > MAX_PARAM_NAME_BYTES {
            name.truncate(MAX_PARAM_NAME_BYTES); // ASCII: any byte is a char boundary
            while name.ends_with('_') {
                name.pop();
            }
        }
        Some(name)
    }

    /// Whether its context name or its value marks it as a credential.
    pub(crate) fn is_secret(&self) -> bool {
        self.named_credential
            || self
                .context_name()
                .as_deref()
                .is_some_and(secrets::is_secret_name)
            || self
                .string_value
                .as_deref()
                .is_some_and(|v| secrets::is_secret_value(v) || fallback::holds_shell_secret(v))
    }
}

/// Why a tree walk gave up (the fallback tokenizer takes over).
#[derive(Debug)]
pub(crate) enum WalkError {
    TooDeep,
}

struct Extracted {
    code_hash: String,
    params: Vec<RawParam>,
    tool_calls: Vec<String>,
    /// Steps read from the tree; `None` when the tree was not read (fallback).
    steps: Option<Vec<steps::RawStep>>,
}

/// Normalize `code` written in `language` (see `resolve_language` for the names). Never
/// panics; only input over `MAX_INPUT_BYTES` is an error. Unparsable code, code nested too
/// deeply and unknown languages go to the deterministic token-level fallback
/// (`parse_ok == false` with a reason).
pub fn normalize(code: &str, language: &str) -> CoreResult<Normalized> {
    normalize_with(code, language, true)
}

/// `normalize`, reading the steps only when `with_steps` (otherwise `steps` is empty): the
/// capture path stores no steps (they are derived on read), so it does not pay for them.
pub fn normalize_with(code: &str, language: &str, with_steps: bool) -> CoreResult<Normalized> {
    check_size(code)?;
    let (language_name, outcome) = match resolve_language(language) {
        LanguageChoice::Parsed(lang) => {
            // A bug in the tree path must not take the caller down: the token fallback is
            // always there, so a panic becomes a fallback with a reason that says so.
            let walked = std::panic::catch_unwind(|| parse_and_walk(code, lang, with_steps))
                .unwrap_or_else(|_| Err("internal error in the tree normalizer".to_owned()));
            (
                lang.canonical_name().to_owned(),
                walked.map_err(|reason| (Some(lang), reason)),
            )
        }
        LanguageChoice::Other(name) => {
            let reason = if name.is_empty() {
                "no language given".to_owned()
            } else {
                format!("no parser for language `{name}`")
            };
            (name, Err((None, reason)))
        }
    };
    let (extracted, fallback_reason) = match outcome {
        Ok(extracted) => (extracted, String::new()),
        Err((lang, reason)) => (
            fallback::normalize_tokens(code, &language_name, lang),
            reason,
        ),
    };
    Ok(assemble(code, language_name, extracted, fallback_reason))
}

/// Parse only, with the same parser `normalize` uses: the benchmark's baseline. `true` when
/// the code parsed without syntax errors; `false` for unknown languages.
pub fn parse_only(code: &str, language: &str) -> CoreResult<bool> {
    check_size(code)?;
    match resolve_language(language) {
        LanguageChoice::Parsed(lang) => {
            Ok(language::parse(lang, code).is_some_and(|tree| !tree.root_node().has_error()))
        }
        LanguageChoice::Other(_) => Ok(false),
    }
}

fn check_size(code: &str) -> CoreResult<()> {
    if code.len() > MAX_INPUT_BYTES {
        return Err(CoreError::TooLarge {
            field: "code".into(),
            reason: format!(
                "is {} bytes of UTF-8, the limit is {MAX_INPUT_BYTES}",
                code.len()
            ),
        });
    }
    Ok(())
}

fn parse_and_walk(code: &str, lang: Lang, with_steps: bool) -> Result<Extracted, String> {
    let too_deep = || format!("nesting deeper than {MAX_TREE_DEPTH} syntax levels");
    if max_bracket_nesting(code) > MAX_BRACKET_NESTING {
        return Err(format!("brackets nested deeper than {MAX_BRACKET_NESTING}"));
    }
    let tree = language::parse(lang, code).ok_or_else(|| "the parser gave up".to_owned())?;
    if tree.root_node().has_error() {
        return Err(syntax_error_reason(&tree));
    }
    let mut canon = canonical::Canonical::new(
        NORMALIZER_VERSION,
        lang.canonical_name(),
        "tree",
        code.len(),
    );
    let result =
        tree::walk(&tree, code, lang, &mut canon, MAX_TREE_DEPTH).map_err(|_| too_deep())?;
    let spans: Vec<(usize, usize)> = result.params.iter().map(|p| (p.start, p.end)).collect();
    let steps = if with_steps {
        steps::read_steps(&tree, code, lang, &result.tool_calls, &spans)
    } else {
        Some(Vec::new())
    };
    Ok(Extracted {
        code_hash: canon.hash(),
        params: result.params,
        tool_calls: result.tool_calls,
        steps,
    })
}

/// Deepest `(`/`[`/`{` nesting, counted over raw text (a cheap guard before parsing).
fn max_bracket_nesting(code: &str) -> usize {
    let mut depth = 0usize;
    let mut deepest = 0usize;
    for byte in code.bytes() {
        match byte {
            b'(' | b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// "syntax error at line L, column C" for the first ERROR or MISSING node.
fn syntax_error_reason(tree: &tree_sitter::Tree) -> String {
    let mut cursor = tree.walk();
    loop {
        let node = cursor.node();
        if node.is_error() || node.is_missing() {
            let at = node.start_position();
            let what = if node.is_missing() {
                "missing token"
            } else {
                "syntax error"
            };
            return format!("{what} at line {}, column {}", at.row + 1, at.column + 1);
        }
        // Only subtrees that contain an error are worth entering.
        let mut moved = cursor.goto_first_child();
        while moved && !cursor.node().has_error() {
            moved = cursor.goto_next_sibling();
        }
        if !moved {
            let at = cursor.node().start_position();
            return format!(
                "syntax error at line {}, column {}",
                at.row + 1,
                at.column + 1
            );
        }
    }
}

/// Name, flag and place the parameters; build the template, the redacted code and the schema.
fn assemble(
    code: &str,
    language: String,
    extracted: Extracted,
    fallback_reason: String,
) -> Normalized {
    let mut names = naming::NameAllocator::default();
    let mut template = String::with_capacity(code.len());
    let mut redacted = String::with_capacity(code.len());
    let mut params = Vec::with_capacity(extracted.params.len());
    let mut formats = Vec::with_capacity(extracted.params.len());
    let (mut byte_at, mut char_at) = (0usize, 0usize);
    // The placeholder each raw parameter became, if any (steps name their parameters).
    let mut placeholder: Vec<Option<String>> = vec![None; extracted.params.len()];
    for (raw_index, raw) in extracted.params.into_iter().enumerate() {
        if raw.start < byte_at || raw.end > code.len() {
            continue; // overlapping spans cannot happen; skip rather than corrupt the template
        }
        let secret = raw.is_secret();
        let gap = &code[byte_at..raw.start];
        let literal_text = &code[raw.start..raw.end];
        template.push_str(gap);
        redacted.push_str(gap);
        let shown = if raw.fragment {
            redacted_fragment(literal_text)
        } else if secret {
            redacted_literal(literal_text)
        } else {
            literal_text.into()
        };
        redacted.push_str(&shown);
        let start = char_at + gap.chars().count();
        let end = start + literal_text.chars().count();
        (byte_at, char_at) = (raw.end, end);
        if raw.overflow {
            template.push_str(&shown);
            continue;
        }
        let base = raw.context_name().unwrap_or_else(|| {
            match raw.json_type {
                JsonType::String => "STR",
                JsonType::Integer | JsonType::Number => "NUM",
            }
            .to_owned()
        });
        formats.push(schema::string_format(raw.string_value.as_deref(), secret));
        let name = names.allocate(&base);
        template.push_str(&name);
        placeholder[raw_index] = Some(name.clone());
        params.push(Param {
            name,
            json_type: raw.json_type,
            value_json: raw.value_json,
            start,
            end,
            secret,
        });
    }
    template.push_str(&code[byte_at..]);
    redacted.push_str(&code[byte_at..]);
    let schema_json = schema::infer_schema(&params, &formats);
    // A tool named by a URL keeps no credential of it, as the template and the redacted code
    // keep none (docs/normalization.md, Tool calls).
    let tool_calls: Vec<String> = extracted
        .tool_calls
        .iter()
        .map(|tool| secrets::redact_name(tool).into_owned())
        .collect();
    let steps = match extracted.steps {
        Some(raw_steps) => name_steps(raw_steps, &placeholder),
        None => steps::unread_steps(&tool_calls),
    };
    Normalized {
        language,
        template: secrets::redact_code(&template).into_owned(),
        code_hash: extracted.code_hash,
        params,
        tool_calls,
        parse_ok: fallback_reason.is_empty(),
        fallback_reason,
        schema_json,
        redacted_code: secrets::redact_code(&redacted).into_owned(),
        steps,
    }
}

/// What a secret literal becomes in the redacted code (and in the template when it stays
/// code): `REDACTED_LITERAL`, but a Python byte string stays one (`b"[REDACTED]"`), so the
/// stored code read again keeps it code, as the template has it, and its steps name no
/// placeholder the pattern lacks (docs/normalization.md, Secrets).
fn redacted_literal(literal_text: &str) -> std::borrow::Cow<'static, str> {
    let prefix_len = literal_text
        .bytes()
        .take_while(u8::is_ascii_alphabetic)
        .count();
    if literal_text.starts_with('`') {
        // a template stays one: `` String.raw`[REDACTED]` `` still reads as a tagged template
        return "`[REDACTED]`".into();
    }
    let (prefix, rest) = literal_text.split_at(prefix_len);
    if !prefix.bytes().any(|b| b.eq_ignore_ascii_case(&b'b')) {
        return REDACTED_LITERAL.into();
    }
    match ["\"\"\"", "'''", "\"", "'"]
        .into_iter()
        .find(|quote| rest.starts_with(quote))
    {
        Some(quote) => format!("{prefix}{quote}[REDACTED]{quote}").into(),
        None => REDACTED_LITERAL.into(),
    }
}

/// What the literal text of an interpolated string given as a credential becomes
/// (`tree.rs`, `credential_fragment`): `[REDACTED]`, but an HTTP auth scheme (`f"Bearer
/// {token}"`) or one separator (`f"{user}:{pw}"`) holds no secret and stays, so the stored
/// code still sends what the run did (docs/normalization.md, Secrets).
fn redacted_fragment(text: &str) -> std::borrow::Cow<'_, str> {
    if holds_no_secret(text) {
        text.into()
    } else {
        "[REDACTED]".into()
    }
}

/// Whether a piece of a credential's value holds no secret: nothing, an HTTP auth scheme
/// (`Bearer `) or one separator (`:`), as the text of `f"Bearer {token}"` or the `":"` of
/// `user + ":" + pw`, once its format fields are left out (`"Bearer {}"`, `"%s:%s"`, the
/// `""` of `"".join(...)`; docs/normalization.md, Secrets).
pub(crate) fn holds_no_secret(text: &str) -> bool {
    let text = without_format_fields(text);
    let scheme = ["Bearer ", "Basic ", "Token "]
        .iter()
        .any(|scheme| text.eq_ignore_ascii_case(scheme));
    let separator = text.len() == 1 && text.bytes().all(|b| b" :-_./@,;=".contains(&b));
    text.is_empty() || scheme || separator
}

/// `text` without its `{...}` and `%s` / `%(name)s` format fields, in one pass.
fn without_format_fields(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(['{', '%']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let field = if tail.starts_with('{') {
            tail.find('}').map(|end| end + 1)
        } else {
            let mut end = 1;
            if tail[end..].starts_with('(') {
                end += tail[end..].find(')').map_or(tail.len(), |close| close + 1);
            }
            end += tail.get(end..).map_or(0, |t| {
                t.len()
                    - t.trim_start_matches(|c: char| "-#0 +.123456789".contains(c))
                        .len()
            });
            tail.get(end..)
                .and_then(|t| t.chars().next())
                .filter(char::is_ascii_alphabetic)
                .map(|_| end + 1)
        };
        match field {
            Some(len) => rest = &tail[len..],
            None => {
                out.push_str(&tail[..1]);
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Give the steps' parameters their placeholder names; a literal that stayed code (past
/// `MAX_PARAMS`) is no parameter, so an argument made only of such literals is a literal.
/// Names and paths read from string keys are redacted as free text (a key may hold a
/// credential; docs/normalization.md, Secrets).
fn name_steps(raw_steps: Vec<steps::RawStep>, placeholder: &[Option<String>]) -> Vec<Step> {
    raw_steps
        .into_iter()
        .map(|raw| Step {
            tool: secrets::redact_name(&raw.tool).into_owned(),
            arguments: raw
                .arguments
                .into_iter()
                .map(|arg| {
                    let parameters: Vec<String> = arg
                        .params
                        .iter()
                        .filter_map(|&i| placeholder.get(i).cloned().flatten())
                        .collect();
                    let kind = if arg.kind == ArgKind::Parameter && parameters.is_empty() {
                        ArgKind::Literal
                    } else {
                        arg.kind
                    };
                    StepArgument {
                        name: secrets::redact_text(&arg.name).into_owned(),
                        kind,
                        parameters,
                        sources: arg
                            .sources
                            .into_iter()
                            .map(|source| StepSource {
                                step: source.step,
                                path: secrets::redact_text(&source.path).into_owned(),
                            })
                            .collect(),
                    }
                })
                .collect(),
            depends_on: raw.depends_on,
            flow_known: raw.flow_known,
        })
        .collect()
}

#[cfg(test)]
mod tests;
