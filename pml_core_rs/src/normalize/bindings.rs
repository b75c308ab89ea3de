//! Which names the snippet binds itself (variables, parameters, functions, loop targets...).
//! Only those are renamed to positional names in the canonical form, so `const data = ...`
//! and `const x = ...` hash alike while free names (`mcp`, `console`, `print`) still count.
//! Scopes are ignored on purpose: a name bound anywhere in the snippet is local everywhere.

use std::collections::HashSet;

use tree_sitter::{Node, TreeCursor};

use super::grammar::Grammar;

/// Where binding patterns are found: the grammar's tables, a reusable cursor for child scans
/// and the list the patterns go to.
pub struct Sites<'s, 't> {
    pub grammar: &'static Grammar,
    pub cursor: &'s mut TreeCursor<'t>,
    pub out: &'s mut Vec<Node<'t>>,
}

impl<'t> Sites<'_, 't> {
    fn push_field(&mut self, node: Node<'t>, field: &str) {
        if let Some(child) = self.grammar.child(node, field) {
            self.out.push(child);
        }
    }

    fn push_named_children(&mut self, node: Node<'t>) {
        self.out.extend(node.named_children(self.cursor));
    }

    pub fn js(&mut self, node: Node<'t>, kind: &str) {
        match kind {
            "variable_declarator" => self.push_field(node, "name"),
            "function_declaration"
            | "generator_function_declaration"
            | "function_expression"
            | "function"
            | "generator_function"
            | "class_declaration"
            | "class" => self.push_field(node, "name"),
            "formal_parameters" => self.push_named_children(node),
            "arrow_function" | "catch_clause" => self.push_field(node, "parameter"),
            "for_in_statement" if self.grammar.child(node, "kind").is_some() => {
                self.push_field(node, "left");
            }
            "import_specifier" => {
                if let Some(alias) = self.grammar.child(node, "alias") {
                    self.out.push(alias);
                } else {
                    self.push_field(node, "name");
                }
            }
            "import_clause" | "namespace_import" => {
                let grammar = self.grammar;
                self.out.extend(
                    node.named_children(self.cursor)
                        .filter(|c| grammar.kind(*c) == "identifier"),
                );
            }
            _ => {}
        }
    }

    pub fn python(&mut self, node: Node<'t>, kind: &str) {
        match kind {
            "assignment" | "for_statement" | "for_in_clause" => self.push_field(node, "left"),
            "named_expression" | "function_definition" | "class_definition" => {
                self.push_field(node, "name");
            }
            "parameters" | "lambda_parameters" => self.push_named_children(node),
            "as_pattern" | "aliased_import" => self.push_field(node, "alias"),
            _ => {}
        }
    }

    /// Add every identifier a binding pattern introduces (not those in default values);
    /// nested patterns go to `out` for the caller to feed back.
    pub fn collect_pattern<'a>(
        &mut self,
        node: Node<'t>,
        code: &'a str,
        bound: &mut HashSet<&'a str>,
    ) {
        match self.grammar.kind(node) {
            "identifier" | "shorthand_property_identifier_pattern" => {
                if let Ok(name) = node.utf8_text(code.as_bytes()) {
                    bound.insert(name);
                }
            }
            "object_pattern"
            | "array_pattern"
            | "rest_pattern"
            | "pattern_list"
            | "tuple_pattern"
            | "list_pattern"
            | "tuple"
            | "list"
            | "list_splat_pattern"
            | "dictionary_splat_pattern"
            | "list_splat"
            | "as_pattern_target"
            | "parenthesized_expression" => self.push_named_children(node),
            "pair_pattern" => self.push_field(node, "value"),
            "assignment_pattern" | "object_assignment_pattern" => self.push_field(node, "left"),
            "required_parameter" | "optional_parameter" => self.push_field(node, "pattern"),
            "default_parameter" | "typed_default_parameter" => self.push_field(node, "name"),
            "typed_parameter" => {
                // Its one unnamed-field child is the bound name; `type` is the annotation.
                let grammar = self.grammar;
                let first = node
                    .named_children(self.cursor)
                    .find(|c| grammar.kind(*c) != "type");
                if let Some(first) = first {
                    self.out.push(first);
                }
            }
            _ => {}
        }
    }
}
