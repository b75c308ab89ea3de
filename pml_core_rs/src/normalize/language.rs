//! Language names: aliases to a canonical name, and the tree-sitter grammar of each parsed language.

use std::cell::RefCell;

use tree_sitter::{Language, ParseOptions, ParseState, Parser, Tree};

use super::grammar::{self, Grammar};

/// A language the normalizer parses with a real grammar.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    JavaScript,
    /// TypeScript; `tsx` selects the TSX grammar (JSX allowed), same canonical name.
    TypeScript {
        tsx: bool,
    },
    Python,
}

impl Lang {
    /// The canonical name reported in `Normalized.language` and hashed into `code_hash`.
    pub fn canonical_name(self) -> &'static str {
        match self {
            Lang::JavaScript => "javascript",
            Lang::TypeScript { .. } => "typescript",
            Lang::Python => "python",
        }
    }

    pub fn is_python(self) -> bool {
        matches!(self, Lang::Python)
    }

    /// Lookup tables of this grammar (kind and field names by id), built once.
    pub fn tables(self) -> &'static Grammar {
        grammar::tables(self.slot(), || self.grammar())
    }

    fn grammar(self) -> Language {
        match self {
            Lang::JavaScript => tree_sitter_javascript::LANGUAGE.into(),
            Lang::TypeScript { tsx: false } => tree_sitter_typescript::LANGUAGE_TYPESCRIPT.into(),
            Lang::TypeScript { tsx: true } => tree_sitter_typescript::LANGUAGE_TSX.into(),
            Lang::Python => tree_sitter_python::LANGUAGE.into(),
        }
    }

    fn slot(self) -> usize {
        match self {
            Lang::JavaScript => 0,
            Lang::TypeScript { tsx: false } => 1,
            Lang::TypeScript { tsx: true } => 2,
            Lang::Python => 3,
        }
    }
}

/// What the caller's `language` string names: a parsed language, or another one (lowercased,
/// trimmed) that only the fallback tokenizer handles.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LanguageChoice {
    Parsed(Lang),
    Other(String),
}

/// Resolve a user-supplied language name (case-insensitive, surrounding spaces ignored).
pub fn resolve(language: &str) -> LanguageChoice {
    let lowered = language.trim().to_ascii_lowercase();
    let lang = match lowered.as_str() {
        "js" | "javascript" | "mjs" | "cjs" | "jsx" | "node" => Lang::JavaScript,
        "ts" | "typescript" | "mts" | "cts" | "deno" => Lang::TypeScript { tsx: false },
        "tsx" => Lang::TypeScript { tsx: true },
        "py" | "python" | "python3" | "py3" => Lang::Python,
        _ => return LanguageChoice::Other(lowered),
    };
    LanguageChoice::Parsed(lang)
}

thread_local! {
    // A parser is cheap to reuse and costly to create; one per thread and grammar keeps
    // `normalize` free of locks, so Python threads run it in parallel.
    static PARSERS: RefCell<[Option<Parser>; 4]> = const { RefCell::new([None, None, None, None]) };
}

/// tree-sitter's error recovery can spend time and memory far beyond an input's size: a
/// 186-byte TypeScript fuzz input held one parse for minutes while it grew to gigabytes, and
/// repeated, it cost about 5 ms a byte. A parse is cancelled, and the code goes to the
/// token-level fallback (docs/normalization.md, Fallback), once it has made
/// `PARSE_CHECKS_BASE` progress checks with every parse version in error (the code would go to
/// the fallback anyway: an error no version escapes stays in the tree), or
/// `PARSE_CHECKS_BASE` plus one a `PARSE_BYTES_PER_CHECK` bytes of code in all. tree-sitter
/// makes a check every 100 parse operations, at the same points for the same input, so where
/// a parse stops never depends on the machine. Valid code takes 0.015 to 0.06 checks a byte
/// (dense shapes: `a;b;c;`, arithmetic, long number arrays, in the three grammars).
pub const PARSE_CHECKS_BASE: usize = 256;
/// See `PARSE_CHECKS_BASE`: 0.25 checks a byte, four times the densest valid code measured.
pub const PARSE_BYTES_PER_CHECK: usize = 4;

/// Parse `code` with the grammar of `lang`; `None` when tree-sitter gives up (it does not
/// on well-formed input; error recovery normally yields a tree with ERROR nodes instead) or
/// when its parse outgrows its budget (`PARSE_CHECKS_BASE`).
pub fn parse(lang: Lang, code: &str) -> Option<Tree> {
    PARSERS.with(|cell| {
        let mut parsers = cell.borrow_mut();
        let slot = &mut parsers[lang.slot()];
        if slot.is_none() {
            let mut parser = Parser::new();
            // The grammar crates are pinned to versions built for this tree-sitter ABI, so
            // this cannot fail at run time; a failure would surface as `None` (fallback).
            parser.set_language(&lang.grammar()).ok()?;
            *slot = Some(parser);
        }
        let parser = slot.as_mut()?;
        let budget = PARSE_CHECKS_BASE + code.len() / PARSE_BYTES_PER_CHECK;
        let mut checks = 0usize;
        let mut outgrown = |state: &ParseState| {
            checks += 1;
            checks > budget || (checks > PARSE_CHECKS_BASE && state.has_error())
        };
        let bytes = code.as_bytes();
        let tree = parser.parse_with_options(
            &mut |at, _| bytes.get(at..).unwrap_or_default(),
            None,
            Some(ParseOptions::new().progress_callback(&mut outgrown)),
        );
        if tree.is_none() {
            // A parser that gave up keeps partial state; reset it for the next call.
            parser.reset();
        }
        tree
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aliases_resolve() {
        assert_eq!(resolve(" JS "), LanguageChoice::Parsed(Lang::JavaScript));
        assert_eq!(resolve("mjs"), LanguageChoice::Parsed(Lang::JavaScript));
        assert_eq!(
            resolve("TypeScript"),
            LanguageChoice::Parsed(Lang::TypeScript { tsx: false })
        );
        assert_eq!(
            resolve("tsx"),
            LanguageChoice::Parsed(Lang::TypeScript { tsx: true })
        );
        assert_eq!(resolve("py"), LanguageChoice::Parsed(Lang::Python));
        assert_eq!(resolve("Rust"), LanguageChoice::Other("rust".into()));
    }

    #[test]
    fn every_grammar_loads_and_parses() {
        for lang in [
            Lang::JavaScript,
            Lang::TypeScript { tsx: false },
            Lang::TypeScript { tsx: true },
            Lang::Python,
        ] {
            let tree = parse(lang, "x = 1\n").expect("tree");
            assert!(!tree.root_node().has_error(), "{lang:?}");
        }
    }
}
