//! `elfiee graph`: the relation graph as DOT, Mermaid or SVG, or its nodes and edges as JSON.

use std::path::Path;

use crate::graph::Graph;
use crate::FileHandle;
use serde_json::json;

use super::output::Out;
use super::{resolve, CliError, GraphArgs, GraphFormat};

/// The format a file name asks for, by its extension.
fn format_of(path: &Path) -> Option<GraphFormat> {
    let ext = path.extension()?.to_str()?.to_ascii_lowercase();
    match ext.as_str() {
        "svg" => Some(GraphFormat::Svg),
        "dot" | "gv" => Some(GraphFormat::Dot),
        "mmd" | "mermaid" => Some(GraphFormat::Mermaid),
        _ => None,
    }
}

fn name(format: GraphFormat) -> &'static str {
    match format {
        GraphFormat::Dot => "dot",
        GraphFormat::Mermaid => "mermaid",
        GraphFormat::Svg => "svg",
    }
}

pub fn run(file: &FileHandle, args: &GraphArgs, out: &Out) -> Result<(), CliError> {
    let format = match (args.format, &args.output) {
        (Some(f), _) => f,
        (None, Some(path)) => format_of(path).ok_or_else(|| {
            CliError::usage(format!(
                "cannot tell the format from '{}'; pass --format dot|mermaid|svg",
                path.display()
            ))
        })?,
        (None, None) => GraphFormat::Dot,
    };
    if out.json && args.output.is_none() && args.format.is_some() {
        return Err(CliError::usage(
            "--json prints the nodes and edges; to draw the graph as well, pass -o FILE",
        ));
    }
    let graph = file.with_state(|state| match &args.from {
        None => Ok(Graph::document(state)),
        Some(input) => {
            let id = resolve::block(state, input)?;
            Graph::around(state, &id, args.depth)
                .map_err(|e| CliError::failed("block_not_found", e.to_string()))
        }
    })?;
    let Some(path) = &args.output else {
        if out.json {
            out.print_text(&serde_json::to_string(&graph).unwrap_or_default());
        } else {
            out.print_text(render(&graph, format).trim_end_matches('\n'));
        }
        return Ok(());
    };
    std::fs::write(path, render(&graph, format))
        .map_err(|e| CliError::failed("io", format!("cannot write {}: {e}", path.display())))?;
    let shown = path.display().to_string();
    let summary = graph.summary();
    let mut v = serde_json::to_value(&graph).unwrap_or_default();
    v["output"] = json!(shown);
    v["format"] = json!(name(format));
    out.print(&v, || {
        format!("wrote {shown} ({}: {summary})", name(format))
    });
    Ok(())
}

fn render(graph: &Graph, format: GraphFormat) -> String {
    match format {
        GraphFormat::Dot => graph.to_dot(),
        GraphFormat::Mermaid => graph.to_mermaid(),
        GraphFormat::Svg => graph.to_svg(),
    }
}
