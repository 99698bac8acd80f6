# mypy: ignore-errors
# (line above added by proto/generate.py: protobuf has no stubs, so Message is Any)
import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class All(_message.Message):
    __slots__ = ("proxy", "install")
    GLOBAL_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    INSTALL_FIELD_NUMBER: _ClassVar[int]
    proxy: Proxy
    install: Install
    def __init__(self, proxy: _Optional[_Union[Proxy, _Mapping]] = ..., install: _Optional[_Union[Install, _Mapping]] = ..., **kwargs) -> None: ...

class AllWithPortRanges(_message.Message):
    __slots__ = ("proxy", "install")
    GLOBAL_FIELD_NUMBER: _ClassVar[int]
    PROXY_FIELD_NUMBER: _ClassVar[int]
    INSTALL_FIELD_NUMBER: _ClassVar[int]
    proxy: ProxyWithPortRanges
    install: Install
    def __init__(self, proxy: _Optional[_Union[ProxyWithPortRanges, _Mapping]] = ..., install: _Optional[_Union[Install, _Mapping]] = ..., **kwargs) -> None: ...

class Global(_message.Message):
    __slots__ = ("linkerd_namespace", "cni_enabled", "version", "identity_context", "auto_inject_context", "omitWebhookSideEffects", "cluster_domain", "endpoint_slice_enabled")
    LINKERD_NAMESPACE_FIELD_NUMBER: _ClassVar[int]
    CNI_ENABLED_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    IDENTITY_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    AUTO_INJECT_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    OMITWEBHOOKSIDEEFFECTS_FIELD_NUMBER: _ClassVar[int]
    CLUSTER_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    ENDPOINT_SLICE_ENABLED_FIELD_NUMBER: _ClassVar[int]
    linkerd_namespace: str
    cni_enabled: bool
    version: str
    identity_context: IdentityContext
    auto_inject_context: AutoInjectContext
    omitWebhookSideEffects: bool
    cluster_domain: str
    endpoint_slice_enabled: bool
    def __init__(self, linkerd_namespace: _Optional[str] = ..., cni_enabled: _Optional[bool] = ..., version: _Optional[str] = ..., identity_context: _Optional[_Union[IdentityContext, _Mapping]] = ..., auto_inject_context: _Optional[_Union[AutoInjectContext, _Mapping]] = ..., omitWebhookSideEffects: _Optional[bool] = ..., cluster_domain: _Optional[str] = ..., endpoint_slice_enabled: _Optional[bool] = ...) -> None: ...

class Proxy(_message.Message):
    __slots__ = ("proxy_image", "proxy_init_image", "control_port", "ignore_inbound_ports", "ignore_outbound_ports", "inbound_port", "admin_port", "outbound_port", "resource", "proxy_uid", "log_level", "disable_external_profiles", "proxy_version", "proxy_init_image_version")
    PROXY_IMAGE_FIELD_NUMBER: _ClassVar[int]
    PROXY_INIT_IMAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PORT_FIELD_NUMBER: _ClassVar[int]
    IGNORE_INBOUND_PORTS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_OUTBOUND_PORTS_FIELD_NUMBER: _ClassVar[int]
    INBOUND_PORT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_PORT_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PORT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PROXY_UID_FIELD_NUMBER: _ClassVar[int]
    LOG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DISABLE_EXTERNAL_PROFILES_FIELD_NUMBER: _ClassVar[int]
    PROXY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROXY_INIT_IMAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    proxy_image: Image
    proxy_init_image: Image
    control_port: Port
    ignore_inbound_ports: _containers.RepeatedCompositeFieldContainer[Port]
    ignore_outbound_ports: _containers.RepeatedCompositeFieldContainer[Port]
    inbound_port: Port
    admin_port: Port
    outbound_port: Port
    resource: ResourceRequirements
    proxy_uid: int
    log_level: LogLevel
    disable_external_profiles: bool
    proxy_version: str
    proxy_init_image_version: str
    def __init__(self, proxy_image: _Optional[_Union[Image, _Mapping]] = ..., proxy_init_image: _Optional[_Union[Image, _Mapping]] = ..., control_port: _Optional[_Union[Port, _Mapping]] = ..., ignore_inbound_ports: _Optional[_Iterable[_Union[Port, _Mapping]]] = ..., ignore_outbound_ports: _Optional[_Iterable[_Union[Port, _Mapping]]] = ..., inbound_port: _Optional[_Union[Port, _Mapping]] = ..., admin_port: _Optional[_Union[Port, _Mapping]] = ..., outbound_port: _Optional[_Union[Port, _Mapping]] = ..., resource: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., proxy_uid: _Optional[int] = ..., log_level: _Optional[_Union[LogLevel, _Mapping]] = ..., disable_external_profiles: _Optional[bool] = ..., proxy_version: _Optional[str] = ..., proxy_init_image_version: _Optional[str] = ...) -> None: ...

class ProxyWithPortRanges(_message.Message):
    __slots__ = ("proxy_image", "proxy_init_image", "control_port", "ignore_inbound_ports", "ignore_outbound_ports", "inbound_port", "admin_port", "outbound_port", "resource", "proxy_uid", "log_level", "disable_external_profiles", "proxy_version", "proxy_init_image_version", "debug_image", "debug_image_version", "destination_get_networks", "log_format", "outbound_connect_timeout", "inbound_connect_timeout")
    PROXY_IMAGE_FIELD_NUMBER: _ClassVar[int]
    PROXY_INIT_IMAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_PORT_FIELD_NUMBER: _ClassVar[int]
    IGNORE_INBOUND_PORTS_FIELD_NUMBER: _ClassVar[int]
    IGNORE_OUTBOUND_PORTS_FIELD_NUMBER: _ClassVar[int]
    INBOUND_PORT_FIELD_NUMBER: _ClassVar[int]
    ADMIN_PORT_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_PORT_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    PROXY_UID_FIELD_NUMBER: _ClassVar[int]
    LOG_LEVEL_FIELD_NUMBER: _ClassVar[int]
    DISABLE_EXTERNAL_PROFILES_FIELD_NUMBER: _ClassVar[int]
    PROXY_VERSION_FIELD_NUMBER: _ClassVar[int]
    PROXY_INIT_IMAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEBUG_IMAGE_FIELD_NUMBER: _ClassVar[int]
    DEBUG_IMAGE_VERSION_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_GET_NETWORKS_FIELD_NUMBER: _ClassVar[int]
    LOG_FORMAT_FIELD_NUMBER: _ClassVar[int]
    OUTBOUND_CONNECT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INBOUND_CONNECT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    proxy_image: Image
    proxy_init_image: Image
    control_port: Port
    ignore_inbound_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    ignore_outbound_ports: _containers.RepeatedCompositeFieldContainer[PortRange]
    inbound_port: Port
    admin_port: Port
    outbound_port: Port
    resource: ResourceRequirements
    proxy_uid: int
    log_level: LogLevel
    disable_external_profiles: bool
    proxy_version: str
    proxy_init_image_version: str
    debug_image: Image
    debug_image_version: str
    destination_get_networks: str
    log_format: str
    outbound_connect_timeout: str
    inbound_connect_timeout: str
    def __init__(self, proxy_image: _Optional[_Union[Image, _Mapping]] = ..., proxy_init_image: _Optional[_Union[Image, _Mapping]] = ..., control_port: _Optional[_Union[Port, _Mapping]] = ..., ignore_inbound_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., ignore_outbound_ports: _Optional[_Iterable[_Union[PortRange, _Mapping]]] = ..., inbound_port: _Optional[_Union[Port, _Mapping]] = ..., admin_port: _Optional[_Union[Port, _Mapping]] = ..., outbound_port: _Optional[_Union[Port, _Mapping]] = ..., resource: _Optional[_Union[ResourceRequirements, _Mapping]] = ..., proxy_uid: _Optional[int] = ..., log_level: _Optional[_Union[LogLevel, _Mapping]] = ..., disable_external_profiles: _Optional[bool] = ..., proxy_version: _Optional[str] = ..., proxy_init_image_version: _Optional[str] = ..., debug_image: _Optional[_Union[Image, _Mapping]] = ..., debug_image_version: _Optional[str] = ..., destination_get_networks: _Optional[str] = ..., log_format: _Optional[str] = ..., outbound_connect_timeout: _Optional[str] = ..., inbound_connect_timeout: _Optional[str] = ...) -> None: ...

class Image(_message.Message):
    __slots__ = ("image_name", "pull_policy")
    IMAGE_NAME_FIELD_NUMBER: _ClassVar[int]
    PULL_POLICY_FIELD_NUMBER: _ClassVar[int]
    image_name: str
    pull_policy: str
    def __init__(self, image_name: _Optional[str] = ..., pull_policy: _Optional[str] = ...) -> None: ...

class Port(_message.Message):
    __slots__ = ("port",)
    PORT_FIELD_NUMBER: _ClassVar[int]
    port: int
    def __init__(self, port: _Optional[int] = ...) -> None: ...

class PortRange(_message.Message):
    __slots__ = ("port_range",)
    PORT_RANGE_FIELD_NUMBER: _ClassVar[int]
    port_range: str
    def __init__(self, port_range: _Optional[str] = ...) -> None: ...

class ResourceRequirements(_message.Message):
    __slots__ = ("request_cpu", "request_memory", "limit_cpu", "limit_memory")
    REQUEST_CPU_FIELD_NUMBER: _ClassVar[int]
    REQUEST_MEMORY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_CPU_FIELD_NUMBER: _ClassVar[int]
    LIMIT_MEMORY_FIELD_NUMBER: _ClassVar[int]
    request_cpu: str
    request_memory: str
    limit_cpu: str
    limit_memory: str
    def __init__(self, request_cpu: _Optional[str] = ..., request_memory: _Optional[str] = ..., limit_cpu: _Optional[str] = ..., limit_memory: _Optional[str] = ...) -> None: ...

class AutoInjectContext(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class IdentityContext(_message.Message):
    __slots__ = ("trust_domain", "trust_anchors_pem", "issuance_lifetime", "clock_skew_allowance", "scheme")
    TRUST_DOMAIN_FIELD_NUMBER: _ClassVar[int]
    TRUST_ANCHORS_PEM_FIELD_NUMBER: _ClassVar[int]
    ISSUANCE_LIFETIME_FIELD_NUMBER: _ClassVar[int]
    CLOCK_SKEW_ALLOWANCE_FIELD_NUMBER: _ClassVar[int]
    SCHEME_FIELD_NUMBER: _ClassVar[int]
    trust_domain: str
    trust_anchors_pem: str
    issuance_lifetime: _duration_pb2.Duration
    clock_skew_allowance: _duration_pb2.Duration
    scheme: str
    def __init__(self, trust_domain: _Optional[str] = ..., trust_anchors_pem: _Optional[str] = ..., issuance_lifetime: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., clock_skew_allowance: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., scheme: _Optional[str] = ...) -> None: ...

class LogLevel(_message.Message):
    __slots__ = ("level",)
    LEVEL_FIELD_NUMBER: _ClassVar[int]
    level: str
    def __init__(self, level: _Optional[str] = ...) -> None: ...

class Install(_message.Message):
    __slots__ = ("cli_version", "flags")
    class Flag(_message.Message):
        __slots__ = ("name", "value")
        NAME_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        name: str
        value: str
        def __init__(self, name: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CLI_VERSION_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    cli_version: str
    flags: _containers.RepeatedCompositeFieldContainer[Install.Flag]
    def __init__(self, cli_version: _Optional[str] = ..., flags: _Optional[_Iterable[_Union[Install.Flag, _Mapping]]] = ...) -> None: ...
