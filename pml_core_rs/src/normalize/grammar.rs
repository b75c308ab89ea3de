//! Per-grammar lookup tables, built once per process. tree-sitter's string APIs are slow on
//! the walk's hot path: `Node::kind` and `TreeCursor::field_name` run strlen and a UTF-8 check
//! on every call, and `child_by_field_name` compares the name against every field of the
//! grammar with strncmp. The tables answer the same questions by id, with the same strings.

use std::num::NonZeroU16;
use std::sync::OnceLock;

use tree_sitter::{Language, Node, TreeCursor};

/// Field names the walk looks children up by. A name missing here still works (through
/// tree-sitter's own lookup), only slower.
const LOOKED_UP_FIELDS: &[&str] = &[
    "alias",
    "argument",
    "arguments",
    "attribute",
    "body",
    "function",
    "key",
    "kind",
    "left",
    "name",
    "object",
    "operator",
    "parameter",
    "pattern",
    "property",
    "value",
];

pub struct Grammar {
    /// Node kind name by kind id (`ts_language_symbol_name`, what `Node::kind` returns).
    kinds: Box<[&'static str]>,
    /// Field name by field id; index 0 is "no field".
    field_names: Box<[Option<&'static str>]>,
    /// Ids of `LOOKED_UP_FIELDS`, same order; `None` when the grammar lacks the field.
    looked_up: Box<[Option<NonZeroU16>]>,
}

impl Grammar {
    pub fn new(language: &Language) -> Grammar {
        let kind_count = u16::try_from(language.node_kind_count()).unwrap_or(u16::MAX);
        let field_count = u16::try_from(language.field_count()).unwrap_or(u16::MAX);
        Grammar {
            kinds: (0..kind_count)
                .map(|id| language.node_kind_for_id(id).unwrap_or(""))
                .collect(),
            field_names: (0..=field_count)
                .map(|id| language.field_name_for_id(id))
                .collect(),
            looked_up: LOOKED_UP_FIELDS
                .iter()
                .map(|name| language.field_id_for_name(name))
                .collect(),
        }
    }

    /// `node.kind()`, from the table. Ids outside it (ERROR nodes use `u16::MAX`) take
    /// tree-sitter's own path, so the answer is always the same string.
    pub fn kind(&self, node: Node<'_>) -> &'static str {
        match self.kinds.get(usize::from(node.kind_id())) {
            Some(kind) if !kind.is_empty() => kind,
            _ => node.kind(),
        }
    }

    /// `cursor.field_name()`, from the table.
    pub fn field_name(&self, cursor: &TreeCursor<'_>) -> Option<&'static str> {
        let id = cursor.field_id()?;
        match self.field_names.get(usize::from(id.get())) {
            Some(name) => *name,
            None => cursor.field_name(),
        }
    }

    /// `node.child_by_field_name(name)`, by id for the names in `LOOKED_UP_FIELDS`.
    pub fn child<'t>(&self, node: Node<'t>, name: &str) -> Option<Node<'t>> {
        match LOOKED_UP_FIELDS.iter().position(|field| *field == name) {
            Some(index) => node.child_by_field_id(self.looked_up[index]?.get()),
            None => node.child_by_field_name(name),
        }
    }
}

/// The tables of `language`, built on first use; `slot` is unique per grammar.
pub fn tables(slot: usize, language: impl FnOnce() -> Language) -> &'static Grammar {
    static TABLES: [OnceLock<Grammar>; 4] = [
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
        OnceLock::new(),
    ];
    TABLES[slot].get_or_init(|| Grammar::new(&language()))
}
