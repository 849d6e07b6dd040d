// How a front-end uses the generated types (type-checked by `tsc --noEmit` in scripts/test).
import type {
  AgentResult,
  Block,
  Command,
  DirectoryStatus,
  EngineError,
  Event,
  ExportBeforeRun,
  LiveDelta,
  MarkdownWritePayload,
  Proposal,
  ProposalStatus,
  ProposedCommand,
} from "./elfiee";

/** Builds the command a Tauri `submit` invoke would carry. */
export function writeMarkdown(editor: string, blockId: string, markdown: string): Command {
  const payload: MarkdownWritePayload = { markdown };
  return {
    cmd_id: crypto.randomUUID(),
    editor_id: editor,
    cap_id: "markdown.write",
    block_id: blockId,
    payload,
  };
}

/** Folds a committed event (from the `elfiee://event` stream) into a UI cache. */
export function onEvent(blocks: Map<string, Block>, event: Event): void {
  const [editor, kind] = event.attribute.split("/", 2);
  switch (kind) {
    case "core.create":
      blocks.set(event.entity, event.value as unknown as Block);
      break;
    case "core.delete":
      blocks.delete(event.entity);
      break;
    case "markdown.write": {
      const block = blocks.get(event.entity);
      const contents = (event.value as { contents?: { markdown?: string } }).contents;
      if (block && contents?.markdown !== undefined) {
        block.contents = { ...(block.contents as object), markdown: contents.markdown };
        block.metadata.updated_at = event.created_at;
      }
      break;
    }
    default:
      console.debug(`event #${event.seq} by ${editor}: ${kind}`);
  }
}

/** The markdown text of a block, if it is a markdown block. */
export function markdownOf(block: Block): string | undefined {
  if (block.block_type !== "markdown") return undefined;
  const contents = block.contents as { markdown?: string } | null;
  return contents?.markdown;
}

/** A message for the user from an engine error (every variant is handled). */
export function describe(error: EngineError): string {
  switch (error.kind) {
    case "rejected":
      switch (error.detail.kind) {
        case "unauthorized":
          return `You may not run ${error.detail.detail.cap} on ${error.detail.detail.block}.`;
        case "conflict":
          return `Someone changed this block (seq ${error.detail.detail.actual}); reload and retry.`;
        default:
          return `Refused: ${JSON.stringify(error.detail)}`;
      }
    case "payload_too_large":
      return `Too large: ${error.detail.size} bytes (limit ${error.detail.limit}).`;
    case "corrupt":
      return `The document is damaged at event ${error.detail.seq}: ${error.detail.reason}`;
    case "closed":
      return "The document was closed.";
    case "not_an_elf":
    case "already_exists":
    case "locked":
    case "storage":
    case "effect":
      return error.detail;
    case "io":
      return `${error.detail.path}: ${error.detail.message}`;
    case "newer_format":
      return `${error.detail.path} needs a newer elfiee (format ${error.detail.found}; this one reads up to ${error.detail.supported}).`;
  }
}

/** Live LLM text, appended to the right proposal's draft. */
export function onDelta(drafts: Map<string, string>, d: LiveDelta): void {
  drafts.set(d.proposal_id, (drafts.get(d.proposal_id) ?? "") + d.text);
}

export function agentSummary(r: AgentResult): string {
  return `${r.agent_block_id} is ${r.status}${r.needs_restart ? " (restart Claude Code)" : ""}: ${r.message}`;
}

/** What an approval dialog shows for a proposal (from the Tauri `agent_proposals` command). */
export function approvalDialog(p: Proposal): { title: string; commands: ProposedCommand[] } {
  const status: ProposalStatus = p.status;
  switch (status) {
    case "pending":
      return { title: `Approve ${p.proposed_commands.length} change(s)? — ${p.prompt}`, commands: p.proposed_commands };
    case "failed":
      return { title: `The agent failed: ${p.error ?? "unknown error"}`, commands: [] };
    case "approved":
    case "rejected":
      return { title: `${status} by ${p.decided_by ?? "?"}${p.feedback ? `: ${p.feedback}` : ""}`, commands: [] };
  }
}

/** Whether a terminal run should first ask "export & run / run / cancel". */
export function mustAsk(rule: ExportBeforeRun, dirty: DirectoryStatus | null): boolean {
  return dirty !== null && rule === "ask" && (dirty.new.length + dirty.modified.length + dirty.removed.length) > 0;
}
