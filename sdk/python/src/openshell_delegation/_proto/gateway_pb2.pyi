from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SandboxKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SANDBOX_KIND_UNSPECIFIED: _ClassVar[SandboxKind]
    SANDBOX_KIND_AGENT: _ClassVar[SandboxKind]
    SANDBOX_KIND_TOOL: _ClassVar[SandboxKind]
SANDBOX_KIND_UNSPECIFIED: SandboxKind
SANDBOX_KIND_AGENT: SandboxKind
SANDBOX_KIND_TOOL: SandboxKind

class GrantSpec(_message.Message):
    __slots__ = ("max_depth", "max_breadth", "max_total", "expires", "program", "tool_idle_seconds", "rate")
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_BREADTH_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    TOOL_IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    max_depth: int
    max_breadth: int
    max_total: int
    expires: str
    program: str
    tool_idle_seconds: int
    rate: str
    def __init__(self, max_depth: _Optional[int] = ..., max_breadth: _Optional[int] = ..., max_total: _Optional[int] = ..., expires: _Optional[str] = ..., program: _Optional[str] = ..., tool_idle_seconds: _Optional[int] = ..., rate: _Optional[str] = ...) -> None: ...

class CreateSandboxRequest(_message.Message):
    __slots__ = ("name", "command", "policy_yaml", "grant", "request_id", "template", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    name: str
    command: _containers.RepeatedScalarFieldContainer[str]
    policy_yaml: str
    grant: GrantSpec
    request_id: str
    template: Template
    env: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., policy_yaml: _Optional[str] = ..., grant: _Optional[_Union[GrantSpec, _Mapping]] = ..., request_id: _Optional[str] = ..., template: _Optional[_Union[Template, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class Template(_message.Message):
    __slots__ = ("cpu_millis", "memory_bytes", "pids", "image", "disk_bytes")
    CPU_MILLIS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    cpu_millis: int
    memory_bytes: int
    pids: int
    image: str
    disk_bytes: int
    def __init__(self, cpu_millis: _Optional[int] = ..., memory_bytes: _Optional[int] = ..., pids: _Optional[int] = ..., image: _Optional[str] = ..., disk_bytes: _Optional[int] = ...) -> None: ...

class CreateChildSandboxRequest(_message.Message):
    __slots__ = ("parent", "name", "kind", "command", "policy_yaml", "request_id", "template", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PARENT_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    parent: str
    name: str
    kind: SandboxKind
    command: _containers.RepeatedScalarFieldContainer[str]
    policy_yaml: str
    request_id: str
    template: Template
    env: _containers.ScalarMap[str, str]
    def __init__(self, parent: _Optional[str] = ..., name: _Optional[str] = ..., kind: _Optional[_Union[SandboxKind, str]] = ..., command: _Optional[_Iterable[str]] = ..., policy_yaml: _Optional[str] = ..., request_id: _Optional[str] = ..., template: _Optional[_Union[Template, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateSandboxResponse(_message.Message):
    __slots__ = ("sandbox", "replayed", "warnings")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    sandbox: Sandbox
    replayed: bool
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sandbox: _Optional[_Union[Sandbox, _Mapping]] = ..., replayed: _Optional[bool] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class Sandbox(_message.Message):
    __slots__ = ("id", "name", "owner", "parent_id", "parent_name", "root_id", "depth", "kind", "phase", "command", "created_by", "created_at", "policy_version", "policy_hash", "exit_code", "phase_reason", "template", "isolation", "root_name")
    ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_NAME_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    DEPTH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_HASH_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PHASE_REASON_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    ISOLATION_FIELD_NUMBER: _ClassVar[int]
    ROOT_NAME_FIELD_NUMBER: _ClassVar[int]
    id: str
    name: str
    owner: str
    parent_id: str
    parent_name: str
    root_id: str
    depth: int
    kind: SandboxKind
    phase: str
    command: _containers.RepeatedScalarFieldContainer[str]
    created_by: str
    created_at: str
    policy_version: int
    policy_hash: str
    exit_code: int
    phase_reason: str
    template: Template
    isolation: str
    root_name: str
    def __init__(self, id: _Optional[str] = ..., name: _Optional[str] = ..., owner: _Optional[str] = ..., parent_id: _Optional[str] = ..., parent_name: _Optional[str] = ..., root_id: _Optional[str] = ..., depth: _Optional[int] = ..., kind: _Optional[_Union[SandboxKind, str]] = ..., phase: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., created_by: _Optional[str] = ..., created_at: _Optional[str] = ..., policy_version: _Optional[int] = ..., policy_hash: _Optional[str] = ..., exit_code: _Optional[int] = ..., phase_reason: _Optional[str] = ..., template: _Optional[_Union[Template, _Mapping]] = ..., isolation: _Optional[str] = ..., root_name: _Optional[str] = ...) -> None: ...

class GetSandboxRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class ListSandboxesRequest(_message.Message):
    __slots__ = ("page_size", "page_token", "all")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    ALL_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    all: bool
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., all: _Optional[bool] = ...) -> None: ...

class ListSandboxesResponse(_message.Message):
    __slots__ = ("sandboxes", "next_page_token")
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    next_page_token: str
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListChildrenRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class ListChildrenResponse(_message.Message):
    __slots__ = ("sandboxes",)
    SANDBOXES_FIELD_NUMBER: _ClassVar[int]
    sandboxes: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, sandboxes: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...

class StopSandboxRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class StopSandboxResponse(_message.Message):
    __slots__ = ("stopped",)
    STOPPED_FIELD_NUMBER: _ClassVar[int]
    stopped: _containers.RepeatedCompositeFieldContainer[Sandbox]
    def __init__(self, stopped: _Optional[_Iterable[_Union[Sandbox, _Mapping]]] = ...) -> None: ...

class DeleteSandboxRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class GetPolicyRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class SetPolicyRequest(_message.Message):
    __slots__ = ("sandbox", "policy_yaml")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    policy_yaml: str
    def __init__(self, sandbox: _Optional[str] = ..., policy_yaml: _Optional[str] = ...) -> None: ...

class PolicyResponse(_message.Message):
    __slots__ = ("sandbox_id", "sandbox_name", "version", "policy_yaml", "policy_hash", "warnings")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    POLICY_HASH_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    sandbox_name: str
    version: int
    policy_yaml: str
    policy_hash: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, sandbox_id: _Optional[str] = ..., sandbox_name: _Optional[str] = ..., version: _Optional[int] = ..., policy_yaml: _Optional[str] = ..., policy_hash: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ...) -> None: ...

class GetGlobalMaxRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SetGlobalMaxRequest(_message.Message):
    __slots__ = ("policy_yaml",)
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    policy_yaml: str
    def __init__(self, policy_yaml: _Optional[str] = ...) -> None: ...

class GlobalMaxResponse(_message.Message):
    __slots__ = ("version", "policy_yaml", "policy_hash")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_YAML_FIELD_NUMBER: _ClassVar[int]
    POLICY_HASH_FIELD_NUMBER: _ClassVar[int]
    version: int
    policy_yaml: str
    policy_hash: str
    def __init__(self, version: _Optional[int] = ..., policy_yaml: _Optional[str] = ..., policy_hash: _Optional[str] = ...) -> None: ...

class CheckPolicyRequest(_message.Message):
    __slots__ = ("boundary_yaml", "candidate_yaml", "parent")
    BOUNDARY_YAML_FIELD_NUMBER: _ClassVar[int]
    CANDIDATE_YAML_FIELD_NUMBER: _ClassVar[int]
    PARENT_FIELD_NUMBER: _ClassVar[int]
    boundary_yaml: str
    candidate_yaml: str
    parent: str
    def __init__(self, boundary_yaml: _Optional[str] = ..., candidate_yaml: _Optional[str] = ..., parent: _Optional[str] = ...) -> None: ...

class CheckPolicyResponse(_message.Message):
    __slots__ = ("verdict", "counterexample", "hint", "reason")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    COUNTEREXAMPLE_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    verdict: str
    counterexample: str
    hint: str
    reason: str
    def __init__(self, verdict: _Optional[str] = ..., counterexample: _Optional[str] = ..., hint: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("id", "root_id", "root_name", "max_depth", "max_breadth", "max_total", "expires_at", "program", "state", "created_by", "created_at", "ended_at", "children_admitted", "tool_idle_seconds", "program_resolved", "rate")
    ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_NAME_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_BREADTH_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    CHILDREN_ADMITTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_RESOLVED_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    id: int
    root_id: str
    root_name: str
    max_depth: int
    max_breadth: int
    max_total: int
    expires_at: str
    program: str
    state: str
    created_by: str
    created_at: str
    ended_at: str
    children_admitted: int
    tool_idle_seconds: int
    program_resolved: str
    rate: str
    def __init__(self, id: _Optional[int] = ..., root_id: _Optional[str] = ..., root_name: _Optional[str] = ..., max_depth: _Optional[int] = ..., max_breadth: _Optional[int] = ..., max_total: _Optional[int] = ..., expires_at: _Optional[str] = ..., program: _Optional[str] = ..., state: _Optional[str] = ..., created_by: _Optional[str] = ..., created_at: _Optional[str] = ..., ended_at: _Optional[str] = ..., children_admitted: _Optional[int] = ..., tool_idle_seconds: _Optional[int] = ..., program_resolved: _Optional[str] = ..., rate: _Optional[str] = ...) -> None: ...

class CreateGrantRequest(_message.Message):
    __slots__ = ("sandbox", "grant")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    GRANT_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    grant: GrantSpec
    def __init__(self, sandbox: _Optional[str] = ..., grant: _Optional[_Union[GrantSpec, _Mapping]] = ...) -> None: ...

class GetGrantRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class ListGrantsRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class ListGrantsResponse(_message.Message):
    __slots__ = ("grants",)
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class UpdateGrantRequest(_message.Message):
    __slots__ = ("sandbox", "max_depth", "max_breadth", "max_total", "expires", "program", "tool_idle_seconds", "rate")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    MAX_DEPTH_FIELD_NUMBER: _ClassVar[int]
    MAX_BREADTH_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    TOOL_IDLE_SECONDS_FIELD_NUMBER: _ClassVar[int]
    RATE_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    max_depth: int
    max_breadth: int
    max_total: int
    expires: str
    program: str
    tool_idle_seconds: int
    rate: str
    def __init__(self, sandbox: _Optional[str] = ..., max_depth: _Optional[int] = ..., max_breadth: _Optional[int] = ..., max_total: _Optional[int] = ..., expires: _Optional[str] = ..., program: _Optional[str] = ..., tool_idle_seconds: _Optional[int] = ..., rate: _Optional[str] = ...) -> None: ...

class RevokeGrantRequest(_message.Message):
    __slots__ = ("sandbox",)
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    def __init__(self, sandbox: _Optional[str] = ...) -> None: ...

class ListAuditRequest(_message.Message):
    __slots__ = ("sandbox", "user", "since", "until", "refusals_only", "page_size", "page_token")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    USER_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    REFUSALS_ONLY_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    user: str
    since: str
    until: str
    refusals_only: bool
    page_size: int
    page_token: str
    def __init__(self, sandbox: _Optional[str] = ..., user: _Optional[str] = ..., since: _Optional[str] = ..., until: _Optional[str] = ..., refusals_only: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("id", "at", "action", "outcome", "code", "message", "actor", "owner", "sandbox_id", "sandbox_name", "parent_id", "root_id", "request_id", "details_json")
    ID_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    OWNER_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_NAME_FIELD_NUMBER: _ClassVar[int]
    PARENT_ID_FIELD_NUMBER: _ClassVar[int]
    ROOT_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    id: int
    at: str
    action: str
    outcome: str
    code: str
    message: str
    actor: str
    owner: str
    sandbox_id: str
    sandbox_name: str
    parent_id: str
    root_id: str
    request_id: str
    details_json: str
    def __init__(self, id: _Optional[int] = ..., at: _Optional[str] = ..., action: _Optional[str] = ..., outcome: _Optional[str] = ..., code: _Optional[str] = ..., message: _Optional[str] = ..., actor: _Optional[str] = ..., owner: _Optional[str] = ..., sandbox_id: _Optional[str] = ..., sandbox_name: _Optional[str] = ..., parent_id: _Optional[str] = ..., root_id: _Optional[str] = ..., request_id: _Optional[str] = ..., details_json: _Optional[str] = ...) -> None: ...

class ListAuditResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[AuditEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[AuditEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class VerifyAuditRequest(_message.Message):
    __slots__ = ("heads",)
    HEADS_FIELD_NUMBER: _ClassVar[int]
    heads: _containers.RepeatedCompositeFieldContainer[AuditHead]
    def __init__(self, heads: _Optional[_Iterable[_Union[AuditHead, _Mapping]]] = ...) -> None: ...

class VerifyAuditResponse(_message.Message):
    __slots__ = ("chains", "receipts", "broken")
    CHAINS_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    BROKEN_FIELD_NUMBER: _ClassVar[int]
    chains: int
    receipts: int
    broken: _containers.RepeatedCompositeFieldContainer[AuditChainStatus]
    def __init__(self, chains: _Optional[int] = ..., receipts: _Optional[int] = ..., broken: _Optional[_Iterable[_Union[AuditChainStatus, _Mapping]]] = ...) -> None: ...

class AuditChainStatus(_message.Message):
    __slots__ = ("chain", "receipts", "head_seq", "head_hash", "broken_seq", "broken_id", "problem", "detail")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    RECEIPTS_FIELD_NUMBER: _ClassVar[int]
    HEAD_SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_HASH_FIELD_NUMBER: _ClassVar[int]
    BROKEN_SEQ_FIELD_NUMBER: _ClassVar[int]
    BROKEN_ID_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    chain: str
    receipts: int
    head_seq: int
    head_hash: str
    broken_seq: int
    broken_id: int
    problem: str
    detail: str
    def __init__(self, chain: _Optional[str] = ..., receipts: _Optional[int] = ..., head_seq: _Optional[int] = ..., head_hash: _Optional[str] = ..., broken_seq: _Optional[int] = ..., broken_id: _Optional[int] = ..., problem: _Optional[str] = ..., detail: _Optional[str] = ...) -> None: ...

class ListAuditHeadsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class AuditHead(_message.Message):
    __slots__ = ("chain", "seq", "head", "at")
    CHAIN_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    chain: str
    seq: int
    head: str
    at: str
    def __init__(self, chain: _Optional[str] = ..., seq: _Optional[int] = ..., head: _Optional[str] = ..., at: _Optional[str] = ...) -> None: ...

class ListAuditHeadsResponse(_message.Message):
    __slots__ = ("heads", "next_page_token")
    HEADS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    heads: _containers.RepeatedCompositeFieldContainer[AuditHead]
    next_page_token: str
    def __init__(self, heads: _Optional[_Iterable[_Union[AuditHead, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class CreateUserRequest(_message.Message):
    __slots__ = ("name", "admin")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    name: str
    admin: bool
    def __init__(self, name: _Optional[str] = ..., admin: _Optional[bool] = ...) -> None: ...

class CreateUserResponse(_message.Message):
    __slots__ = ("name", "token")
    NAME_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    name: str
    token: str
    def __init__(self, name: _Optional[str] = ..., token: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("kind", "name", "admin", "sandbox_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ADMIN_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    kind: str
    name: str
    admin: bool
    sandbox_id: str
    def __init__(self, kind: _Optional[str] = ..., name: _Optional[str] = ..., admin: _Optional[bool] = ..., sandbox_id: _Optional[str] = ...) -> None: ...

class ConnectRequest(_message.Message):
    __slots__ = ("pid",)
    PID_FIELD_NUMBER: _ClassVar[int]
    pid: int
    def __init__(self, pid: _Optional[int] = ...) -> None: ...

class ConnectResponse(_message.Message):
    __slots__ = ("sandbox_id", "name", "policy_json", "policy_version", "boundaries_json")
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    BOUNDARIES_JSON_FIELD_NUMBER: _ClassVar[int]
    sandbox_id: str
    name: str
    policy_json: str
    policy_version: int
    boundaries_json: str
    def __init__(self, sandbox_id: _Optional[str] = ..., name: _Optional[str] = ..., policy_json: _Optional[str] = ..., policy_version: _Optional[int] = ..., boundaries_json: _Optional[str] = ...) -> None: ...

class ReportExitRequest(_message.Message):
    __slots__ = ("exit_code", "error")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    error: str
    def __init__(self, exit_code: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ReportExitResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ReportIsolationRequest(_message.Message):
    __slots__ = ("landlock", "detail", "skipped")
    LANDLOCK_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    landlock: str
    detail: str
    skipped: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, landlock: _Optional[str] = ..., detail: _Optional[str] = ..., skipped: _Optional[_Iterable[str]] = ...) -> None: ...

class ReportIsolationResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CurrentPolicyRequest(_message.Message):
    __slots__ = ("known_version",)
    KNOWN_VERSION_FIELD_NUMBER: _ClassVar[int]
    known_version: int
    def __init__(self, known_version: _Optional[int] = ...) -> None: ...

class CurrentPolicyResponse(_message.Message):
    __slots__ = ("version", "policy_json")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    POLICY_JSON_FIELD_NUMBER: _ClassVar[int]
    version: int
    policy_json: str
    def __init__(self, version: _Optional[int] = ..., policy_json: _Optional[str] = ...) -> None: ...

class Denial(_message.Message):
    __slots__ = ("at", "program", "host", "port", "method", "path", "reason")
    AT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    at: str
    program: str
    host: str
    port: int
    method: str
    path: str
    reason: str
    def __init__(self, at: _Optional[str] = ..., program: _Optional[str] = ..., host: _Optional[str] = ..., port: _Optional[int] = ..., method: _Optional[str] = ..., path: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ReportDenialsRequest(_message.Message):
    __slots__ = ("denials",)
    DENIALS_FIELD_NUMBER: _ClassVar[int]
    denials: _containers.RepeatedCompositeFieldContainer[Denial]
    def __init__(self, denials: _Optional[_Iterable[_Union[Denial, _Mapping]]] = ...) -> None: ...

class ReportDenialsResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SupervisorTask(_message.Message):
    __slots__ = ("id", "exec", "stdin", "stdin_eof", "cancel", "read_file")
    ID_FIELD_NUMBER: _ClassVar[int]
    EXEC_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_EOF_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    READ_FILE_FIELD_NUMBER: _ClassVar[int]
    id: int
    exec: ExecStart
    stdin: bytes
    stdin_eof: bool
    cancel: bool
    read_file: ReadFile
    def __init__(self, id: _Optional[int] = ..., exec: _Optional[_Union[ExecStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., stdin_eof: _Optional[bool] = ..., cancel: _Optional[bool] = ..., read_file: _Optional[_Union[ReadFile, _Mapping]] = ...) -> None: ...

class SupervisorEvent(_message.Message):
    __slots__ = ("id", "stdout", "stderr", "exit", "file_info", "file_data", "file_end")
    ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    FILE_INFO_FIELD_NUMBER: _ClassVar[int]
    FILE_DATA_FIELD_NUMBER: _ClassVar[int]
    FILE_END_FIELD_NUMBER: _ClassVar[int]
    id: int
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    file_info: FileInfo
    file_data: bytes
    file_end: FileEnd
    def __init__(self, id: _Optional[int] = ..., stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ..., file_info: _Optional[_Union[FileInfo, _Mapping]] = ..., file_data: _Optional[bytes] = ..., file_end: _Optional[_Union[FileEnd, _Mapping]] = ...) -> None: ...

class ExecInput(_message.Message):
    __slots__ = ("start", "stdin", "stdin_eof")
    START_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    STDIN_EOF_FIELD_NUMBER: _ClassVar[int]
    start: ExecStart
    stdin: bytes
    stdin_eof: bool
    def __init__(self, start: _Optional[_Union[ExecStart, _Mapping]] = ..., stdin: _Optional[bytes] = ..., stdin_eof: _Optional[bool] = ...) -> None: ...

class ExecStart(_message.Message):
    __slots__ = ("sandbox", "command", "env", "workdir", "timeout_seconds", "output_cap", "stdin")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    WORKDIR_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CAP_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    command: _containers.RepeatedScalarFieldContainer[str]
    env: _containers.ScalarMap[str, str]
    workdir: str
    timeout_seconds: int
    output_cap: int
    stdin: bool
    def __init__(self, sandbox: _Optional[str] = ..., command: _Optional[_Iterable[str]] = ..., env: _Optional[_Mapping[str, str]] = ..., workdir: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., output_cap: _Optional[int] = ..., stdin: _Optional[bool] = ...) -> None: ...

class ExecOutput(_message.Message):
    __slots__ = ("stdout", "stderr", "exit")
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    stdout: bytes
    stderr: bytes
    exit: ExecExit
    def __init__(self, stdout: _Optional[bytes] = ..., stderr: _Optional[bytes] = ..., exit: _Optional[_Union[ExecExit, _Mapping]] = ...) -> None: ...

class ExecExit(_message.Message):
    __slots__ = ("code", "timed_out", "output_capped", "error")
    CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CAPPED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    code: int
    timed_out: bool
    output_capped: bool
    error: str
    def __init__(self, code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., output_capped: _Optional[bool] = ..., error: _Optional[str] = ...) -> None: ...

class ListDenialsRequest(_message.Message):
    __slots__ = ("sandbox", "limit")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    limit: int
    def __init__(self, sandbox: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListDenialsResponse(_message.Message):
    __slots__ = ("denials",)
    DENIALS_FIELD_NUMBER: _ClassVar[int]
    denials: _containers.RepeatedCompositeFieldContainer[Denial]
    def __init__(self, denials: _Optional[_Iterable[_Union[Denial, _Mapping]]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("version", "driver", "database", "database_ok", "disk")
    VERSION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_FIELD_NUMBER: _ClassVar[int]
    DATABASE_FIELD_NUMBER: _ClassVar[int]
    DATABASE_OK_FIELD_NUMBER: _ClassVar[int]
    DISK_FIELD_NUMBER: _ClassVar[int]
    version: str
    driver: str
    database: str
    database_ok: bool
    disk: DiskStatus
    def __init__(self, version: _Optional[str] = ..., driver: _Optional[str] = ..., database: _Optional[str] = ..., database_ok: _Optional[bool] = ..., disk: _Optional[_Union[DiskStatus, _Mapping]] = ...) -> None: ...

class DiskStatus(_message.Message):
    __slots__ = ("backend", "path", "total_bytes", "free_bytes", "used_bytes", "owed_bytes", "reserve_bytes", "running", "kept")
    BACKEND_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    FREE_BYTES_FIELD_NUMBER: _ClassVar[int]
    USED_BYTES_FIELD_NUMBER: _ClassVar[int]
    OWED_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESERVE_BYTES_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    KEPT_FIELD_NUMBER: _ClassVar[int]
    backend: str
    path: str
    total_bytes: int
    free_bytes: int
    used_bytes: int
    owed_bytes: int
    reserve_bytes: int
    running: int
    kept: int
    def __init__(self, backend: _Optional[str] = ..., path: _Optional[str] = ..., total_bytes: _Optional[int] = ..., free_bytes: _Optional[int] = ..., used_bytes: _Optional[int] = ..., owed_bytes: _Optional[int] = ..., reserve_bytes: _Optional[int] = ..., running: _Optional[int] = ..., kept: _Optional[int] = ...) -> None: ...

class Proposal(_message.Message):
    __slots__ = ("id", "sandbox_id", "sandbox_name", "state", "rules_json", "reason", "created_at", "expires_at", "decided_at", "decided_by", "decision_reason", "policy_version", "superseded_by")
    ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_ID_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    RULES_JSON_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    DECISION_REASON_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    SUPERSEDED_BY_FIELD_NUMBER: _ClassVar[int]
    id: int
    sandbox_id: str
    sandbox_name: str
    state: str
    rules_json: str
    reason: str
    created_at: str
    expires_at: str
    decided_at: str
    decided_by: str
    decision_reason: str
    policy_version: int
    superseded_by: int
    def __init__(self, id: _Optional[int] = ..., sandbox_id: _Optional[str] = ..., sandbox_name: _Optional[str] = ..., state: _Optional[str] = ..., rules_json: _Optional[str] = ..., reason: _Optional[str] = ..., created_at: _Optional[str] = ..., expires_at: _Optional[str] = ..., decided_at: _Optional[str] = ..., decided_by: _Optional[str] = ..., decision_reason: _Optional[str] = ..., policy_version: _Optional[int] = ..., superseded_by: _Optional[int] = ...) -> None: ...

class ProposePolicyRequest(_message.Message):
    __slots__ = ("document", "program")
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    PROGRAM_FIELD_NUMBER: _ClassVar[int]
    document: str
    program: str
    def __init__(self, document: _Optional[str] = ..., program: _Optional[str] = ...) -> None: ...

class GetOwnProposalRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class WaitOwnProposalRequest(_message.Message):
    __slots__ = ("id", "timeout_ms")
    ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    id: int
    timeout_ms: int
    def __init__(self, id: _Optional[int] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class WaitOwnProposalResponse(_message.Message):
    __slots__ = ("proposal", "timed_out")
    PROPOSAL_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    proposal: Proposal
    timed_out: bool
    def __init__(self, proposal: _Optional[_Union[Proposal, _Mapping]] = ..., timed_out: _Optional[bool] = ...) -> None: ...

class ListProposalsRequest(_message.Message):
    __slots__ = ("sandbox", "state", "limit")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    state: str
    limit: int
    def __init__(self, sandbox: _Optional[str] = ..., state: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListProposalsResponse(_message.Message):
    __slots__ = ("proposals",)
    PROPOSALS_FIELD_NUMBER: _ClassVar[int]
    proposals: _containers.RepeatedCompositeFieldContainer[Proposal]
    def __init__(self, proposals: _Optional[_Iterable[_Union[Proposal, _Mapping]]] = ...) -> None: ...

class ApproveProposalRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    def __init__(self, id: _Optional[int] = ...) -> None: ...

class RejectProposalRequest(_message.Message):
    __slots__ = ("id", "reason")
    ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    id: int
    reason: str
    def __init__(self, id: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...

class GetFileRequest(_message.Message):
    __slots__ = ("sandbox", "path", "max_bytes")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    path: str
    max_bytes: int
    def __init__(self, sandbox: _Optional[str] = ..., path: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FileChunk(_message.Message):
    __slots__ = ("info", "data")
    INFO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    info: FileInfo
    data: bytes
    def __init__(self, info: _Optional[_Union[FileInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class FileInfo(_message.Message):
    __slots__ = ("path", "size")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ...) -> None: ...

class ReadFile(_message.Message):
    __slots__ = ("path", "max_bytes")
    PATH_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    path: str
    max_bytes: int
    def __init__(self, path: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class FileEnd(_message.Message):
    __slots__ = ("code", "message", "details_json")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DETAILS_JSON_FIELD_NUMBER: _ClassVar[int]
    code: str
    message: str
    details_json: str
    def __init__(self, code: _Optional[str] = ..., message: _Optional[str] = ..., details_json: _Optional[str] = ...) -> None: ...

class ExchangeDoorCredentialRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DoorCredential(_message.Message):
    __slots__ = ("token", "audience", "expires_at", "ttl_seconds", "mcp_max_body_bytes")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    AUDIENCE_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    MCP_MAX_BODY_BYTES_FIELD_NUMBER: _ClassVar[int]
    token: str
    audience: str
    expires_at: str
    ttl_seconds: int
    mcp_max_body_bytes: int
    def __init__(self, token: _Optional[str] = ..., audience: _Optional[str] = ..., expires_at: _Optional[str] = ..., ttl_seconds: _Optional[int] = ..., mcp_max_body_bytes: _Optional[int] = ...) -> None: ...

class WatchSandboxRequest(_message.Message):
    __slots__ = ("sandbox", "timeout_seconds")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    sandbox: str
    timeout_seconds: int
    def __init__(self, sandbox: _Optional[str] = ..., timeout_seconds: _Optional[int] = ...) -> None: ...
