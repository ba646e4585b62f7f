"""Any LangChain chat model, from one `models` entry of the YAML config.

`provider` names a LangChain integration (the table below, as langchain's
`init_chat_model` names them) or, for any other, its class as
"package.module:ClassName". Its package is an optional extra of Waybill
(`pip install waybill[anthropic]`); `openai` is always there.

Three things vary by provider, and are said here once:
- the keyword arguments of the endpoint and the key (`base_url`, `api_key`);
- reasoning effort: OpenAI's `reasoning_effort`, Anthropic's thinking budget,
  found by the fields the class has;
- the parameter filter: `drop_params` are removed from what Waybill passes to the
  class and from every request the client builds (`_get_request_payload`, which
  the OpenAI and Anthropic clients, among others, build their requests with).
"""

from __future__ import annotations

import functools
import importlib
import os
from typing import Any

from langchain_core.language_models import BaseChatModel

from waybill.common.config_file import ModelSpec

# provider -> (module, class): the providers langchain's `init_chat_model` knows best.
PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("langchain_openai", "ChatOpenAI"),
    "azure_openai": ("langchain_openai", "AzureChatOpenAI"),
    "anthropic": ("langchain_anthropic", "ChatAnthropic"),
    "google_genai": ("langchain_google_genai", "ChatGoogleGenerativeAI"),
    "google_vertexai": ("langchain_google_vertexai", "ChatVertexAI"),
    "bedrock_converse": ("langchain_aws", "ChatBedrockConverse"),
    "mistralai": ("langchain_mistralai", "ChatMistralAI"),
    "groq": ("langchain_groq", "ChatGroq"),
    "deepseek": ("langchain_deepseek", "ChatDeepSeek"),
    "xai": ("langchain_xai", "ChatXAI"),
    "ollama": ("langchain_ollama", "ChatOllama"),
    "fireworks": ("langchain_fireworks", "ChatFireworks"),
    "together": ("langchain_together", "ChatTogether"),
    "openrouter": ("langchain_openrouter", "ChatOpenRouter"),
    "cohere": ("langchain_cohere", "ChatCohere"),
}
# Anthropic-style thinking: the budget each effort buys, and the answer's room beyond it.
THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
ANSWER_TOKENS = 4096


class ProviderError(ValueError):
    """A `models` entry names a provider that cannot be built; the message says why."""


def provider_class(provider: str) -> type[BaseChatModel]:
    module_name, _, class_name = provider.partition(":")
    if not class_name:
        if provider not in PROVIDERS:
            known = ", ".join(["scripted", *PROVIDERS])
            raise ProviderError(
                f"unknown provider '{provider}' (known: {known}; "
                "or name the class as 'package.module:ClassName')"
            )
        module_name, class_name = PROVIDERS[provider]
    try:
        module = importlib.import_module(module_name)
    except ImportError:
        package = module_name.split(".")[0].replace("_", "-")
        raise ProviderError(
            f"provider '{provider}' needs the {package} package "
            f"(pip install {package}, or the waybill extra of that name)"
        ) from None
    found = getattr(module, class_name, None)
    if not (isinstance(found, type) and issubclass(found, BaseChatModel)):
        raise ProviderError(f"provider '{provider}': {class_name} is not a LangChain chat model")
    return found


def _fields(cls: type[BaseChatModel]) -> set[str]:
    """The names a class takes as keyword arguments (its fields and their aliases)."""
    names = set(cls.model_fields)
    names.update(f.alias for f in cls.model_fields.values() if f.alias)
    return names


def endpoint_kwargs(spec: ModelSpec, cls: type[BaseChatModel]) -> dict[str, Any]:
    """Where the provider is and the key it takes (named by environment variable)."""
    kwargs: dict[str, Any] = {"model": spec.model or spec.name}
    if spec.base_url:
        kwargs["base_url"] = spec.base_url
    if spec.provider == "openai":
        # An OpenAI-compatible server often wants no key; the client insists on one.
        kwargs["api_key"] = os.environ.get(spec.api_key_env or "OPENAI_API_KEY", "not-needed")
    elif spec.api_key_env:
        kwargs["api_key"] = os.environ.get(spec.api_key_env, "")
    fields = _fields(cls)
    for streams in ("streaming", "stream_usage"):  # tokens as they come, and their usage
        if streams in fields:
            kwargs[streams] = True
    return kwargs


def reasoning_kwargs(
    effort: str | None, cls: type[BaseChatModel], given: dict[str, Any]
) -> dict[str, Any]:
    """The provider's own words for a reasoning effort ("none": the provider's default)."""
    if effort is None or effort == "none":
        return {}
    fields = _fields(cls)
    if "thinking" in fields:  # Anthropic: a budget, and room for the answer beyond it
        budget = THINKING_BUDGETS[effort]
        max_tokens = given.get("max_tokens") or 0
        room = max_tokens if max_tokens > budget else budget + ANSWER_TOKENS
        return {"thinking": {"type": "enabled", "budget_tokens": budget}, "max_tokens": room}
    if "reasoning_effort" in fields:  # OpenAI and the OpenAI-compatible clients
        return {"reasoning_effort": effort}
    if "thinking_budget" in fields:  # Google's Gemini clients
        return {"thinking_budget": THINKING_BUDGETS[effort]}
    raise ProviderError(f"{cls.__name__} takes no reasoning effort; leave reasoning_effort unset")


@functools.cache
def dropping(cls: type[BaseChatModel], dropped: frozenset[str]) -> type[BaseChatModel]:
    """`cls`, whose every request goes without the `dropped` parameters."""
    if not dropped or not hasattr(cls, "_get_request_payload"):
        return cls

    def _get_request_payload(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super(filtered, self)._get_request_payload(*args, **kwargs)
        return {key: value for key, value in payload.items() if key not in dropped}

    namespace = {"_get_request_payload": _get_request_payload, "__module__": cls.__module__}
    filtered: type[BaseChatModel] = type(cls.__name__, (cls,), namespace)
    return filtered


def build_provider_model(
    spec: ModelSpec, effort: str | None, params: dict[str, Any]
) -> BaseChatModel:
    """The configured model, with a run's reasoning effort and sampling parameters."""
    cls = provider_class(spec.provider)
    given = {**spec.options, **params}
    kwargs = {**endpoint_kwargs(spec, cls), **given, **reasoning_kwargs(effort, cls, given)}
    dropped = frozenset(spec.drop_params)
    kept = {key: value for key, value in kwargs.items() if key not in dropped}
    return dropping(cls, dropped)(**kept)
