"""The contract's limits, read from the proto: the one copy the server uses.

Every limit of wm.v1 is a ``buf.validate`` annotation on its field (protos/wm/v1), enforced
at the edge for each request (``api.request_rules``). The services hold the same bounds for
their own work (a page lowered to its maximum, a recall cut to its budget, a check of a value
that did not come through a request); they take them from here, where each is read from the
annotation that states it, so a limit changed in the proto changes everywhere at once and
cannot drift. The limits the proto cannot state (what the operator configures) stay with the
settings that define them. wm_core's tool schemas state two of these to the model
(``MAX_STORED_MEMORY_CHARS``, ``MAX_MEMORY_HITS``); a conformance test holds them equal.
"""

from __future__ import annotations

from google.protobuf.message import Message

from wm_proto.v1 import buf_validate_pb2 as rules
from wm_proto.v1 import resources_pb2 as res
from wm_proto.v1 import working_memory_service_pb2 as api


def field_rules(message: type[Message], field: str) -> rules.FieldRules:
    """The buf.validate rules of ``message.field`` (empty rules when it has none)."""
    options = message.DESCRIPTOR.fields_by_name[field].GetOptions()
    found: rules.FieldRules = options.Extensions[rules.field]
    return found


MAX_REQUEST_ID = field_rules(api.CreateSessionRequest, "request_id").string.max_len
MAX_BATCH = field_rules(api.AddMessagesRequest, "messages").repeated.max_items
MAX_PARTS = field_rules(res.Message, "parts").repeated.max_items
MAX_REMOVED = field_rules(api.RemoveRecentMessagesRequest, "count").int32.lte
MAX_KEEP_RECENT = field_rules(api.CreateCommitRequest, "keep_recent_count").int32.lte
MAX_KEEP_TURNS = field_rules(api.CreateCommitRequest, "keep_recent_turns").int32.lte
MAX_TOKEN_BUDGET = field_rules(api.AssembleContextRequest, "token_budget").int64.lte
MAX_SYSTEM_PROMPT = field_rules(api.AssembleContextRequest, "system_prompt").string.max_len
MAX_REGISTERED_TOOLS = field_rules(api.RegisteredTools, "names").repeated.max_items
MIN_RECALL_TOKENS = field_rules(api.MemoryRecall, "token_budget").int64.gte
MAX_RECALL_TOKENS = field_rules(api.MemoryRecall, "token_budget").int64.lte
MAX_RECALLED = field_rules(api.MemoryRecall, "page_size").int32.lte
MAX_QUERY = field_rules(api.SearchArchivesRequest, "query").string.max_len
# Every search's query must not be blank: the rule's id and message, for the one case the
# edge's CEL cannot see (``services.literal_search.checked_query``).
QUERY_NOT_BLANK = field_rules(api.SearchArchivesRequest, "query").cel[0]
MAX_SEARCH_HITS = field_rules(api.SearchArchivesRequest, "page_size").int32.lte
MAX_MEMORY_HITS = field_rules(api.SearchMemoriesRequest, "page_size").int32.lte
MAX_MEMORY_TEXT = field_rules(res.Memory, "text").string.max_len
MAX_MEMORY_FIELDS = field_rules(res.Memory, "fields").map.max_pairs
MAX_MEMORY_FIELD_VALUE = field_rules(res.Memory, "fields").map.values.string.max_len
MAX_REASON = field_rules(api.RetireMemoryRequest, "reason").string.max_len
MAX_SUPERSEDES = field_rules(res.Memory, "supersedes").repeated.max_items
MAX_PREVIEW_ARCHIVES = field_rules(
    api.PreviewMemoryExtractionRequest, "archives"
).repeated.max_items
