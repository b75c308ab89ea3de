//! Which names the snippet binds itself (variables, parameters, functions, loop targets...).
//! Only those are renamed to positional names in the canonical form, so `const data = ...`
//! and `const x = ...` hash alike while free names (`mcp`, `console`, `print`) still count.
//! Scopes are ignored on purpose: a name bound anywhere in the snippet is local everywhere.

use std::collections::HashSet;

use tree_sitter::{Node, Tree};

use super::language::Lang;
use super::WalkError;

pub fn collect<'a>(
    tree: &Tree,
    code: &'a str,
    lang: Lang,
    max_depth: usize,
) -> Result<HashSet<&'a str>, WalkError> {
    let mut bound = HashSet::new();
    let mut pending: Vec<Node<'_>> = Vec::new();
    let mut cursor = tree.walk();
    let mut depth = 0usize;
    loop {
        let node = cursor.node();
        if lang.is_python() {
            python_binding_sites(node, &mut pending);
        } else {
            js_binding_sites(node, &mut pending);
        }
        while let Some(pattern) = pending.pop() {
            collect_pattern(pattern, code, &mut bound, &mut pending);
        }
        if cursor.goto_first_child() {
            depth += 1;
            if depth > max_depth {
                return Err(WalkError::TooDeep);
            }
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return Ok(bound);
            }
            depth -= 1;
        }
    }
}

fn push_field<'t>(node: Node<'t>, field: &str, out: &mut Vec<Node<'t>>) {
    if let Some(child) = node.child_by_field_name(field) {
        out.push(child);
    }
}

fn push_named_children<'t>(node: Node<'t>, out: &mut Vec<Node<'t>>) {
    let mut cursor = node.walk();
    out.extend(node.named_children(&mut cursor));
}

fn js_binding_sites<'t>(node: Node<'t>, out: &mut Vec<Node<'t>>) {
    match node.kind() {
        "variable_declarator" => push_field(node, "name", out),
        "function_declaration"
        | "generator_function_declaration"
        | "function_expression"
        | "function"
        | "generator_function"
        | "class_declaration"
        | "class" => push_field(node, "name", out),
        "formal_parameters" => push_named_children(node, out),
        "arrow_function" | "catch_clause" => push_field(node, "parameter", out),
        "for_in_statement" if node.child_by_field_name("kind").is_some() => {
            push_field(node, "left", out);
        }
        "import_specifier" => {
            let alias = node.child_by_field_name("alias");
            if let Some(alias) = alias {
                out.push(alias);
            } else {
                push_field(node, "name", out);
            }
        }
        "import_clause" | "namespace_import" => {
            let mut cursor = node.walk();
            out.extend(
                node.named_children(&mut cursor)
                    .filter(|c| c.kind() == "identifier"),
            );
        }
        _ => {}
    }
}

fn python_binding_sites<'t>(node: Node<'t>, out: &mut Vec<Node<'t>>) {
    match node.kind() {
        "assignment" | "for_statement" | "for_in_clause" => push_field(node, "left", out),
        "named_expression" | "function_definition" | "class_definition" => {
            push_field(node, "name", out);
        }
        "parameters" | "lambda_parameters" => push_named_children(node, out),
        "as_pattern" | "aliased_import" => push_field(node, "alias", out),
        _ => {}
    }
}

/// Add every identifier a binding pattern introduces (not those in default values).
fn collect_pattern<'a, 't>(
    node: Node<'t>,
    code: &'a str,
    bound: &mut HashSet<&'a str>,
    pending: &mut Vec<Node<'t>>,
) {
    match node.kind() {
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
        | "parenthesized_expression" => {
            push_named_children(node, pending);
        }
        "pair_pattern" => push_field(node, "value", pending),
        "assignment_pattern" | "object_assignment_pattern" => push_field(node, "left", pending),
        "required_parameter" | "optional_parameter" => push_field(node, "pattern", pending),
        "default_parameter" | "typed_default_parameter" => push_field(node, "name", pending),
        "typed_parameter" => {
            // Its one unnamed-field child is the bound name; `type` is the annotation.
            let mut cursor = node.walk();
            let first = node
                .named_children(&mut cursor)
                .find(|c| c.kind() != "type");
            if let Some(first) = first {
                pending.push(first);
            }
        }
        _ => {}
    }
}
