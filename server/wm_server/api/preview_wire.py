"""PreviewMemoryExtraction's answer on the wire: every proposed op with the guards' verdict.

Kept apart from ``stored_wire`` and ``commit_wire`` (the resources) because it is one RPC's
shape, built from the preview service's result (``services.extraction_preview.Preview``).
"""

from __future__ import annotations

from wm_core import MemoryOpKind, MemoryVerdict
from wm_proto.v1 import resources_pb2 as pb
from wm_proto.v1 import working_memory_service_pb2 as api
from wm_server.api import commit_wire, names, stored_wire
from wm_server.services.extraction import MemoryState
from wm_server.services.extraction_preview import Preview
from wm_server.services.memory_content import iso_to_epoch

_KINDS = {
    MemoryOpKind.CREATE: pb.MEMORY_OP_KIND_CREATE,
    MemoryOpKind.UPDATE: pb.MEMORY_OP_KIND_UPDATE,
    MemoryOpKind.MERGE: pb.MEMORY_OP_KIND_MERGE,
    MemoryOpKind.RETIRE: pb.MEMORY_OP_KIND_RETIRE,
}
_VERDICTS = {
    MemoryVerdict.ACCEPTED: pb.MEMORY_OP_VERDICT_ACCEPTED,
    MemoryVerdict.REFUSED: pb.MEMORY_OP_VERDICT_REFUSED,
    MemoryVerdict.DEDUPLICATED: pb.MEMORY_OP_VERDICT_DEDUPLICATED,
}
_STATES = {
    MemoryState.EXTRACTED: pb.MEMORY_EXTRACTION_STATE_EXTRACTED,
    MemoryState.OFF: pb.MEMORY_EXTRACTION_STATE_OFF,
    MemoryState.FAILED: pb.MEMORY_EXTRACTION_STATE_FAILED,
}
MAX_PROBLEMS = 50


def preview_out(preview: Preview, session_id: str) -> api.PreviewMemoryExtractionResponse:
    extraction = preview.extraction
    ops = []
    for decision in extraction.plan.decisions:
        op = decision.op
        out = api.MemoryOpPreview(
            op_index=decision.op_index,
            kind=_KINDS[op.kind],
            type=stored_wire.MEMORY_TYPES_OUT[op.type.value]
            if op.type
            else pb.MEMORY_TYPE_UNSPECIFIED,
            text=op.text,
            fields=dict(op.fields),
            target_memories=[names.memory(m) for m in op.target_ids],
            reason=op.reason,
            source_messages=[names.message(session_id, m) for m in op.source_message_ids],
            verdict=_VERDICTS[decision.verdict],
            verdict_reason=decision.reason,
            supersedes=[
                api.SupersededMemory(memory=names.memory(m.memory_id), text=m.text)
                for m in preview.supersedes.get(decision.op_index, ())
            ],
        )
        stamp = stored_wire.timestamp(iso_to_epoch(op.event_time))
        if stamp is not None:
            out.event_time.CopyFrom(stamp)
        ops.append(out)
    reason = preview.empty_reason
    return api.PreviewMemoryExtractionResponse(
        ops=ops,
        state=_STATES.get(extraction.state, pb.MEMORY_EXTRACTION_STATE_UNSPECIFIED),
        empty_reason=commit_wire.EMPTY_REASONS[reason.value]
        if reason
        else pb.MEMORY_EXTRACTION_EMPTY_REASON_UNSPECIFIED,
        message=extraction.message,
        problems=list(extraction.problems[:MAX_PROBLEMS]),
        usage=commit_wire.usage_out(extraction.usage),
        message_count=preview.message_count,
    )
