"""Model clients against a real chat-completions server on 127.0.0.1 (``tests/llm_server.py``),
through the real ``openai`` package: the fields of a completion, every injected fault (429 with
Retry-After, 5xx, timeouts, malformed and empty replies, length stops, dropped connections, a server
restarted mid-run), budgets, concurrent use; the reply shapes real servers send (reasoning inline in
``<think>`` tags or in a field, missing usage, non-standard finish reasons, refusals, error objects
in a 200 reply, HTML error pages, event streams, unknown fields); the Inspect client on Inspect's
offline mock model."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from catengine.clients import (Budget, BudgetExceeded, Completion, EndpointError, ModelClient, OpenAIChatClient,
                               RetryPolicy)
from catengine.clients.openai_chat import MalformedReply, parse_chat_completion
from catengine.clients.retry import is_retryable_status, retry_after_seconds
from llm_server import LLMServer, SimulatedLLM, math_spellings
from real_data import amc23_problems_missing

BANK = "math500_lart"
# fast retries: the tests measure what is retried, not how long the default backoff waits
FAST = {"backoff_base": 0.01, "backoff_max": 0.05}


@pytest.fixture(scope="module")
def server():
    with LLMServer(BANK, theta=0.5, seed=3) as srv:
        yield srv


@pytest.fixture
def srv(server):
    """The module's server with no faults and zeroed counts."""
    server.clear_faults()
    server.reset_counts()
    if not server.running:
        server.start()
    yield server
    server.clear_faults()


@pytest.fixture(scope="module")
def bank(server):
    return server.llm.banks[0]


def client_for(server, **kwargs) -> OpenAIChatClient:
    options = {"timeout": 10.0, **FAST}
    options.update(kwargs)
    return OpenAIChatClient(server.model, base_url=server.base_url, **options)


def an_item(server, *, correct: bool = True, longer_than: int = 0) -> str:
    for item in server.llm.banks[0].item_ids:
        if server.llm.truth(item) == correct and server.llm.cot_length(item) > longer_than:
            return item
    raise AssertionError("no such item")


# ----------------------------------------------------------------------------- a reply's fields
def test_completion_records_the_reply_and_the_request(srv, bank):
    item = an_item(srv, correct=True)
    client = client_for(srv, sampling={"temperature": 0.5, "top_p": 0.95, "seed": 7, "top_k": 20,
                                       "chat_template_kwargs": {"enable_thinking": False}})
    assert isinstance(client, ModelClient)
    completion = client.complete(bank.prompt(item), max_tokens=10240)
    assert isinstance(completion, Completion)
    # the server's reply states the reference answer in one of its equivalent spellings
    assert any(f"{{{s}}}" in completion.text or f"${s}$" in completion.text
               for s in math_spellings(bank.content(item).answer))
    assert completion.finish_reason == "stop" and not completion.truncated
    assert completion.completion_tokens == srv.llm.cot_length(item)
    assert completion.prompt_tokens == len(bank.prompt(item)) // 4 + 12
    assert completion.reasoning_tokens is None and completion.reasoning is None
    assert completion.attempts == 1 and completion.latency_s > 0
    assert completion.model == srv.model
    assert completion.request == {"model": srv.model, "max_tokens": 10240, "temperature": 0.5, "top_p": 0.95,
                                  "seed": 7, "top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    record = completion.as_record()
    assert record["text"] == completion.text and record["finish_reason"] == "stop"
    # what went over the wire: known parameters as such, unknown ones in the body as they are
    (sent,) = srv.requests
    assert sent.item == item and sent.max_tokens == 10240
    assert sent.params == {"model": srv.model, "max_tokens": 10240, "temperature": 0.5, "top_p": 0.95, "seed": 7,
                           "top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    assert srv.counts == {item: 1}


def test_a_repeated_request_gets_the_same_reply_and_is_counted_twice(srv, bank):
    item = an_item(srv, correct=False)
    client = client_for(srv)
    first = client.complete(bank.prompt(item), max_tokens=10240)
    second = client.complete(bank.prompt(item), max_tokens=10240)
    assert first.text == second.text and first.completion_tokens == second.completion_tokens
    gold = bank.content(item).answer
    assert not any(f"{{{s}}}" in first.text for s in math_spellings(gold))
    assert srv.asked_more_than_once() == {item: 2}


def test_system_prompt_and_max_completion_tokens(srv, bank):
    item = bank.item_ids[5]
    client = client_for(srv, system_prompt="You are a careful mathematician.", max_tokens_param="max_completion_tokens")
    completion = client.complete(bank.prompt(item), max_tokens=10000)
    assert srv.counts[item] == 1 and srv.requests[0].params["max_completion_tokens"] == 10000
    assert "max_tokens" not in srv.requests[0].params
    assert completion.request["system_prompt"] == "You are a careful mathematician."


# ----------------------------------------------------------------------------- faults
def test_429_waits_at_least_retry_after(srv, bank):
    item = bank.item_ids[1]
    srv.inject("429", times=1, retry_after=1)
    started = time.monotonic()
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    elapsed = time.monotonic() - started
    assert completion.attempts == 2 and completion.finish_reason in ("stop", "length")
    first, second = srv.requests
    assert (first.status, second.status) == (429, 200)
    assert second.at - first.at >= 1.0 and elapsed >= 1.0
    assert srv.counts[item] == 2


def test_retry_after_is_capped(srv, bank):
    srv.inject("429", times=1, retry_after=3600)
    completion = client_for(srv, retry_after_max=0.2).complete(bank.prompt(bank.item_ids[2]), max_tokens=10240)
    first, second = srv.requests
    assert completion.attempts == 2 and 0.2 <= second.at - first.at < 3600


def test_500s_are_retried_then_succeed(srv, bank):
    item = bank.item_ids[3]
    srv.inject("500", times=2)
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    assert completion.attempts == 3 and completion.text
    assert [r.status for r in srv.requests] == [500, 500, 200] and srv.counts[item] == 3


@pytest.mark.parametrize("status", [502, 503, 408, 409])
def test_other_retryable_statuses(srv, bank, status):
    srv.inject("status", status=status, times=1)
    assert client_for(srv).complete(bank.prompt(bank.item_ids[4]), max_tokens=10240).attempts == 2


def test_persistent_500_gives_up_naming_the_url_and_the_attempts(srv, bank):
    item = bank.item_ids[6]
    srv.inject("500", times=None, item=item)
    client = client_for(srv, max_retries=3)
    with pytest.raises(EndpointError) as info:
        client.complete(bank.prompt(item), max_tokens=10240)
    error = info.value
    assert error.endpoint == f"{srv.base_url}/chat/completions" and error.endpoint in str(error)
    assert error.attempts == 4 and "4 attempt(s)" in str(error)
    assert "HTTP 500" in error.last_error and "Internal server error" in error.last_error
    assert srv.counts[item] == 4
    # the fault is the item's only: another item is answered
    assert client.complete(bank.prompt(bank.item_ids[7]), max_tokens=10240).attempts == 1


@pytest.mark.parametrize("status", [400, 401, 404, 422])
def test_a_4xx_other_than_408_409_429_is_not_retried(srv, bank, status):
    srv.inject("status", status=status, times=None)
    with pytest.raises(EndpointError) as info:
        client_for(srv).complete(bank.prompt(bank.item_ids[8]), max_tokens=10240)
    assert info.value.attempts == 1 and f"HTTP {status}" in info.value.last_error and "not retried" in str(info.value)
    assert len(srv.requests) == 1


def test_an_unknown_model_is_a_404_not_retried(srv, bank):
    client = OpenAIChatClient("no-such-model", base_url=srv.base_url, **FAST)
    with pytest.raises(EndpointError, match="does not exist") as info:
        client.complete(bank.prompt(bank.item_ids[0]), max_tokens=100)
    assert info.value.attempts == 1 and len(srv.requests) == 1


def test_a_timeout_is_retried(srv, bank):
    item = bank.item_ids[9]
    srv.inject("slow", delay=1.5, times=1)
    started = time.monotonic()
    completion = client_for(srv, timeout=0.4).complete(bank.prompt(item), max_tokens=10240)
    assert completion.attempts == 2 and completion.text
    assert time.monotonic() - started >= 0.4
    assert srv.counts[item] == 2


def test_persistent_timeouts_give_up(srv, bank):
    srv.inject("slow", delay=2.0, times=None)
    with pytest.raises(EndpointError, match="timeout of 0.3 s") as info:
        client_for(srv, timeout=0.3, max_retries=1).complete(bank.prompt(bank.item_ids[10]), max_tokens=10240)
    assert info.value.attempts == 2


def test_a_slow_reply_within_the_timeout_is_not_retried(srv, bank):
    srv.inject("slow", delay=0.3, times=1)
    completion = client_for(srv, timeout=5).complete(bank.prompt(bank.item_ids[11]), max_tokens=10240)
    assert completion.attempts == 1 and completion.latency_s >= 0.3


@pytest.mark.parametrize("kind", ["malformed", "missing_choices"])
def test_a_malformed_reply_is_retried_a_bounded_number_of_times(srv, bank, kind):
    item = bank.item_ids[12]
    srv.inject(kind, times=1)
    assert client_for(srv).complete(bank.prompt(item), max_tokens=10240).attempts == 2
    srv.reset_counts()
    srv.inject(kind, times=None)
    with pytest.raises(EndpointError, match="malformed reply") as info:
        client_for(srv, malformed_retries=2, max_retries=10).complete(bank.prompt(item), max_tokens=10240)
    assert info.value.attempts == 3 and srv.counts[item] == 3


def test_parse_chat_completion_names_what_is_wrong():
    with pytest.raises(MalformedReply, match="not valid JSON"):
        parse_chat_completion(b'{"choices": [')
    with pytest.raises(MalformedReply, match="no choices"):
        parse_chat_completion(b'{"choices": []}')
    with pytest.raises(MalformedReply, match="no message"):
        parse_chat_completion(b'{"choices": [{"finish_reason": "stop"}]}')
    fields = parse_chat_completion(b'{"choices": [{"message": {"content": null, "reasoning_content": "hm"}, '
                                   b'"finish_reason": "length"}], "usage": {"completion_tokens": 9, '
                                   b'"completion_tokens_details": {"reasoning_tokens": 9}}}')
    assert fields["text"] == "" and fields["reasoning"] == "hm" and fields["reasoning_tokens"] == 9
    assert fields["prompt_tokens"] is None and fields["finish_reason"] == "length"


def test_empty_content_is_a_completion_not_retried(srv, bank):
    item = bank.item_ids[13]
    srv.inject("empty", times=1)
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    assert completion.text == "" and completion.finish_reason == "stop" and completion.attempts == 1
    assert srv.counts[item] == 1


def test_a_length_stop_is_a_truncated_completion_not_retried(srv, bank):
    item = an_item(srv, longer_than=300)
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=200)
    assert completion.finish_reason == "length" and completion.truncated
    assert completion.completion_tokens == 200 and completion.attempts == 1
    assert "\\boxed{" not in completion.text or not completion.text.rstrip().endswith("}")
    # an injected length stop, below the drawn length
    srv.inject("length", times=1)
    other = client_for(srv).complete(bank.prompt(bank.item_ids[14]), max_tokens=10240)
    assert other.truncated and other.completion_tokens == 10240 and other.attempts == 1


def test_a_dropped_connection_is_retried(srv, bank):
    srv.inject("drop", times=2)
    assert client_for(srv).complete(bank.prompt(bank.item_ids[15]), max_tokens=10240).attempts == 3


def test_a_server_restarted_mid_run_is_survived(srv, bank):
    client = client_for(srv, backoff_base=0.1, backoff_max=0.3, max_retries=20)
    assert client.complete(bank.prompt(bank.item_ids[16]), max_tokens=10240).attempts == 1
    port = srv.port
    restarted = srv.outage(0.8)
    completion = client.complete(bank.prompt(bank.item_ids[17]), max_tokens=10240)   # refused until it is back
    restarted.join()
    assert srv.port == port and completion.attempts > 1
    assert srv.counts[bank.item_ids[17]] == 1   # the refused attempts never reached it


def test_a_server_that_stays_down_ends_with_the_url(srv, bank):
    client = client_for(srv, max_retries=2)
    srv.stop()
    try:
        with pytest.raises(EndpointError, match="connection failed") as info:
            client.complete(bank.prompt(bank.item_ids[18]), max_tokens=10240)
    finally:
        srv.start()
    assert info.value.attempts == 3 and srv.base_url in str(info.value)


# ----------------------------------------------------------------------------- API key
def test_the_api_key_comes_from_the_named_environment_variable(bank, monkeypatch):
    with LLMServer(BANK, seed=3, api_key="sekrit") as keyed:
        prompt = bank.prompt(bank.item_ids[0])
        monkeypatch.setenv("CATENGINE_TEST_KEY", "sekrit")
        assert OpenAIChatClient(keyed.model, base_url=keyed.base_url, api_key_env="CATENGINE_TEST_KEY",
                                **FAST).complete(prompt, max_tokens=100).attempts == 1
        monkeypatch.delenv("CATENGINE_TEST_KEY")
        with pytest.raises(EndpointError, match="HTTP 401") as info:
            OpenAIChatClient(keyed.model, base_url=keyed.base_url, api_key_env="CATENGINE_TEST_KEY",
                             **FAST).complete(prompt, max_tokens=100)
        assert info.value.attempts == 1
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        OpenAIChatClient("gpt-x")


def test_settings_are_checked():
    with pytest.raises(ValueError, match="sampling may not set 'max_tokens'"):
        OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", sampling={"max_tokens": 5})
    with pytest.raises(ValueError, match="timeout"):
        OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", timeout=0)
    client = OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1")
    with pytest.raises(ValueError, match="max_tokens"):
        client.complete("hi", max_tokens=0)
    with pytest.raises(ValueError, match="max_retries"):
        RetryPolicy(max_retries=-1)


# ----------------------------------------------------------------------------- reasoning models
def test_reasoning_content_is_kept_apart_and_its_tokens_counted(bank):
    with LLMServer(BANK, theta=0.5, seed=3, reasoning=True) as reasoner:
        item = an_item(reasoner, correct=True)
        completion = client_for(reasoner).complete(bank.prompt(item), max_tokens=10240)
        assert completion.reasoning and completion.reasoning not in completion.text
        assert "\\boxed{" in completion.text or "Final answer" in completion.text
        assert completion.completion_tokens == reasoner.llm.cot_length(item)
        assert 0 <= completion.reasoning_tokens < completion.completion_tokens
        cut = client_for(reasoner).complete(bank.prompt(an_item(reasoner, longer_than=100)), max_tokens=50)
        assert cut.truncated and cut.text == "" and cut.reasoning and cut.reasoning_tokens == 50


# ----------------------------------------------------------------------------- retry policy
def test_retry_policy_backoff_and_retry_after():
    policy = RetryPolicy(backoff_base=0.5, backoff_max=4.0, retry_after_max=10.0)
    import random

    rng = random.Random(0)
    for retry in range(1, 8):
        waits = [policy.backoff(retry, rng) for _ in range(200)]
        ceiling = min(4.0, 0.5 * 2 ** (retry - 1))
        assert min(waits) >= 0 and max(waits) <= ceiling and max(waits) > 0.8 * ceiling   # full jitter
    assert all(policy.delay(1, 3.0, rng) >= 3.0 for _ in range(50))
    assert all(policy.delay(1, 500.0, rng) == 10.0 for _ in range(50))
    assert retry_after_seconds({"Retry-After": "2"}) == 2.0
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after_seconds({"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, now=1445412470.0) == 10.0
    assert retry_after_seconds({"Retry-After": "soon"}) is None and retry_after_seconds({}) is None
    assert [s for s in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 504) if is_retryable_status(s)] == \
        [408, 409, 429, 500, 502, 503, 504]


# ----------------------------------------------------------------------------- budgets
def test_budget_reservations_and_charges():
    budget = Budget(max_requests=10, max_completion_tokens=1000, max_cost_usd=1.0,
                    usd_per_million_input=100.0, usd_per_million_output=400.0)
    a = budget.reserve(30, 600)                       # 600 held
    with pytest.raises(BudgetExceeded, match="completion-token cap of 1,000") as info:
        budget.reserve(30, 500)                       # 600 + 500 > 1000
    assert info.value.cap == "completion_tokens" and info.value.spent.requests == 1
    budget.settle(a, 30, 250)                         # actually used 250
    b = budget.reserve(30, 700)                       # 250 + 700 <= 1000
    budget.settle(b, None, None, replied=False)       # failed: the request counts, no tokens
    spent = budget.spent
    assert (spent.requests, spent.prompt_tokens, spent.completion_tokens) == (2, 30, 250)
    assert spent.cost_usd == pytest.approx((30 * 100 + 250 * 400) / 1e6)
    spend = Budget(max_cost_usd=0.003, usd_per_million_output=1000.0)
    spend.settle(spend.reserve(0, 2), 0, 2)          # $0.002 spent
    with pytest.raises(BudgetExceeded, match="spend cap") as info:
        spend.reserve(0, 2)                           # 0.002 + worst 0.002 > 0.003
    assert info.value.cap == "cost_usd"
    spend.reserve(0, 1)                               # 0.002 + 0.001 fits
    capped = Budget(max_requests=1)
    capped.reserve("x", None)
    with pytest.raises(BudgetExceeded, match="request cap of 1"):
        capped.reserve("x", None)
    with pytest.raises(ValueError, match="prices"):
        Budget(max_cost_usd=1.0)


def test_budget_caps_requests_tokens_and_spend_against_the_server(srv, bank):
    items = bank.item_ids[20:30]
    client = client_for(srv, budget=Budget(max_requests=3))
    for item in items[:3]:
        client.complete(bank.prompt(item), max_tokens=10240)
    with pytest.raises(BudgetExceeded, match="request cap of 3"):
        client.complete(bank.prompt(items[3]), max_tokens=10240)
    assert sum(srv.counts.values()) == 3          # refused before it was sent

    srv.reset_counts()
    tokens = Budget(max_completion_tokens=5000)
    client = client_for(srv, budget=tokens)
    with pytest.raises(BudgetExceeded, match="completion-token cap"):
        client.complete(bank.prompt(items[4]), max_tokens=6000)
    assert sum(srv.counts.values()) == 0
    completion = client.complete(bank.prompt(items[4]), max_tokens=4000)
    assert tokens.spent.completion_tokens == completion.completion_tokens

    money = Budget(max_cost_usd=10.0, usd_per_million_input=1.0, usd_per_million_output=3.0)
    completion = client_for(srv, budget=money).complete(bank.prompt(items[5]), max_tokens=10240)
    assert money.spent.cost_usd == pytest.approx((completion.prompt_tokens * 1.0
                                                  + completion.completion_tokens * 3.0) / 1e6)
    assert money.spent.prompt_tokens == completion.prompt_tokens


def test_retries_count_against_the_request_cap(srv, bank):
    srv.inject("500", times=5)
    budget = Budget(max_requests=2)
    with pytest.raises(BudgetExceeded, match="request cap of 2") as info:
        client_for(srv, budget=budget).complete(bank.prompt(bank.item_ids[31]), max_tokens=10240)
    assert "HTTP 500" in "".join(getattr(info.value, "__notes__", []))
    assert len(srv.requests) == 2 and budget.spent.requests == 2 and budget.spent.completion_tokens == 0


# ----------------------------------------------------------------------------- concurrency
def test_eight_threads_share_one_client(srv, bank):
    items = list(bank.item_ids[:160])
    srv.inject("500", times=None, probability=0.15)
    budget = Budget(max_completion_tokens=10**9)
    client = client_for(srv, budget=budget, max_retries=10)
    with ThreadPoolExecutor(8) as pool:
        results = dict(zip(items, pool.map(lambda i: client.complete(bank.prompt(i), max_tokens=10240), items)))
    srv.clear_faults()
    failed = sum(r.attempts - 1 for r in results.values())
    assert failed == srv.faults_served["500"] > 0
    assert set(srv.answered) == set(items) and all(n == 1 for n in srv.answered.values())
    assert sum(srv.counts.values()) == len(items) + failed == budget.spent.requests
    assert budget.spent.completion_tokens == sum(r.completion_tokens for r in results.values())
    # each thread got its own item's reply (the same as asking alone)
    for item in items[:10]:
        alone = client.complete(bank.prompt(item), max_tokens=10240)
        assert alone.text == results[item].text


def test_the_budget_holds_under_concurrency(srv, bank):
    budget = Budget(max_requests=20)
    client = client_for(srv, budget=budget)
    outcomes = []
    lock = threading.Lock()

    def ask(item):
        try:
            client.complete(bank.prompt(item), max_tokens=10240)
            result = "ok"
        except BudgetExceeded:
            result = "refused"
        with lock:
            outcomes.append(result)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(ask, bank.item_ids[40:80]))
    assert outcomes.count("ok") == 20 and outcomes.count("refused") == 20
    assert len(srv.requests) == 20


# ----------------------------------------------------------------------------- the simulated LLM
def test_the_server_answers_as_its_ability_says(srv, bank):
    """The server's replies, read by the bank's grader, are correct exactly when the server drew
    them correct (a sample of items; ``tests/llm_server.py`` states the spellings)."""
    from catengine.grading import grader_for

    llm = srv.llm
    for item in bank.item_ids[::20]:
        content = bank.content(item)
        reply = llm.reply(bank.prompt(item), None)
        assert grader_for(content, bank.protocol).grade(reply.content, content).correct == llm.truth(item), item
    weak, strong = SimulatedLLM(BANK, theta=-2.0), SimulatedLLM(BANK, theta=2.0)
    assert weak.true_accuracy() < srv.llm.true_accuracy() < strong.true_accuracy()
    assert abs(strong.true_accuracy() - strong.expected_accuracy()) < 0.06


@pytest.mark.skipif(amc23_problems_missing() is not None, reason=str(amc23_problems_missing()))
def test_the_server_answers_amc23_from_the_content_file():
    with LLMServer("amc23_lart", theta=1.0, seed=2) as amc:
        bank = amc.llm.banks[0]
        client = client_for(amc)
        for item in bank.item_ids[:5]:
            completion = client.complete(bank.prompt(item), max_tokens=10240)
            said = completion.text.rsplit("\\boxed{", 1)[-1].split("}")[0] if "\\boxed{" in completion.text else None
            if completion.finish_reason == "stop" and said is not None:
                assert (said == bank.content(item).answer) == amc.llm.truth(item)
        assert set(amc.counts) == set(bank.item_ids[:5])


def test_the_models_endpoint(srv):
    import openai

    models = openai.OpenAI(base_url=srv.base_url, api_key="EMPTY", max_retries=0).models.list()
    assert [m.id for m in models.data] == [srv.model]


# ----------------------------------------------------------------------------- Inspect AI models
def test_inspect_client_on_the_mock_model():
    pytest.importorskip("inspect_ai")
    from inspect_ai.model import GenerateConfig, ModelOutput, ModelUsage, get_model

    from catengine.clients import InspectModelClient

    seen = []

    def outputs(messages, tools, tool_choice, config: GenerateConfig):
        seen.append((messages[-1].text, config.max_tokens, config.temperature))
        stop = "max_tokens" if config.max_tokens is not None and config.max_tokens < 100 else "stop"
        output = ModelOutput.from_content("mockllm", f"answer to: {messages[-1].text} \\boxed{{3}}", stop_reason=stop)
        output.usage = ModelUsage(input_tokens=11, output_tokens=config.max_tokens if stop == "max_tokens" else 321,
                                  total_tokens=0, input_tokens_cache_read=4, reasoning_tokens=200)
        return output

    model = get_model("mockllm/model", custom_outputs=outputs, memoize=False)
    with InspectModelClient(model, sampling={"temperature": 0.5, "min_p": 0.05},
                            system_prompt="Be brief.") as client:
        assert isinstance(client, ModelClient) and client.endpoint.startswith("inspect:mockllm/model")
        completion = client.complete("What is 1 + 2?", max_tokens=4096)
        assert completion.text == "answer to: What is 1 + 2? \\boxed{3}" and completion.finish_reason == "stop"
        assert (completion.completion_tokens, completion.prompt_tokens, completion.reasoning_tokens) == (321, 15, 200)
        assert completion.request == {"model": "mockllm/model", "max_tokens": 4096, "temperature": 0.5,
                                      "min_p": 0.05, "system_prompt": "Be brief."}
        cut = client.complete("Long one", max_tokens=50)
        assert cut.finish_reason == "length" and cut.truncated and cut.completion_tokens == 50
        with ThreadPoolExecutor(4) as pool:
            texts = list(pool.map(lambda k: client.complete(f"q{k}", max_tokens=500).text, range(12)))
        assert texts == [f"answer to: q{k} \\boxed{{3}}" for k in range(12)]
    assert seen[0] == ("What is 1 + 2?", 4096, 0.5)

    # the plain mock model counts its tokens offline
    with InspectModelClient("mockllm/model") as plain:
        completion = plain.complete("hello", max_tokens=20)
        assert completion.text == "Default output from mockllm/model" and completion.completion_tokens > 0

    def broken(messages, tools, tool_choice, config):
        raise RuntimeError("provider is down")

    with InspectModelClient(get_model("mockllm/model", custom_outputs=broken, memoize=False),
                            max_retries=0) as failing:
        with pytest.raises(EndpointError, match="provider is down") as info:
            failing.complete("hi", max_tokens=10)
        assert info.value.endpoint.startswith("inspect:mockllm/model")


def test_importing_the_clients_package_loads_neither_client_library():
    import subprocess
    import sys

    code = "import sys, catengine.clients; print('openai' in sys.modules, 'inspect_ai' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["False", "False"]


def test_a_server_process_killed_and_started_again_on_its_port():
    """The server as a subprocess (``ServerProcess``): SIGKILLed while a request waits for it, started
    again on the same port; the client's retries carry the request over; faults and counts go
    through its control routes."""
    from llm_server import ServerProcess

    with ServerProcess(BANK, theta=0.5, seed=3) as proc:
        bank = SimulatedLLM(BANK).banks[0]      # the bank is cached: no second load
        client = OpenAIChatClient(proc.model, base_url=proc.base_url, backoff_base=0.2, backoff_max=0.5,
                                  max_retries=60, timeout=10)
        proc.inject("429", times=1, retry_after=0)
        assert client.complete(bank.prompt(bank.item_ids[0]), max_tokens=10240).attempts == 2
        assert proc.stats()["counts"] == {bank.item_ids[0]: 2}
        port = proc.port
        proc.kill()
        with ThreadPoolExecutor(1) as pool:
            pending = pool.submit(client.complete, bank.prompt(bank.item_ids[1]), max_tokens=10240)
            time.sleep(0.3)
            proc.start()
            completion = pending.result()
        assert proc.port == port and completion.attempts > 1
        assert proc.stats()["counts"] == {bank.item_ids[1]: 1}


# ----------------------------------------------------------------------------- real-world reply shapes
def _grade(bank, item, text):
    from catengine.grading import grader_for

    content = bank.content(item)
    return grader_for(content, bank.protocol).grade(text, content)


@pytest.mark.parametrize("fmt", ["think", "think_open", "reasoning"])
def test_reasoning_inline_or_in_a_reasoning_field_is_kept_apart_from_the_answer(bank, fmt):
    """A reasoning model without a reasoning parser writes ``<think> ... </think> answer`` (or, the
    opening tag in its chat template, ``... </think> answer``): the text is the answer after the
    closing tag, the thinking (which states a draft of the reference answer) is the reasoning, and
    the grader reads the answer alone, so every verdict is the simulated LLM's truth."""
    with LLMServer(BANK, theta=0.5, seed=3, reasoning=fmt) as reasoner:
        client = client_for(reasoner)
        items = [i for i in bank.item_ids[:60] if not bank.content(i).grading_note]
        for item in items:
            completion = client.complete(bank.prompt(item), max_tokens=10240)
            assert completion.finish_reason == "stop" and "think>" not in completion.text, item
            assert reasoner.llm.draft(item) in completion.reasoning, item
            assert completion.completion_tokens == reasoner.llm.cot_length(item)
            assert _grade(bank, item, completion.text).correct == reasoner.llm.truth(item), item
        # inline thinking is not counted apart by a server without a reasoning parser
        assert (completion.reasoning_tokens is None) == (fmt != "reasoning")


def test_a_reply_cut_off_inside_its_thinking_has_no_answer_to_grade(bank):
    with LLMServer(BANK, theta=0.5, seed=3, reasoning="think") as reasoner:
        wrong = next(i for i in bank.item_ids if reasoner.llm.cot_length(i) > 100 and not reasoner.llm.truth(i))
        cut = client_for(reasoner).complete(bank.prompt(wrong), max_tokens=50)
        # the unclosed thinking ends with a boxed draft of the right answer: it is not the reply's answer
        assert cut.truncated and cut.text == "" and cut.reasoning.endswith(reasoner.llm.draft(wrong))
        assert _grade(bank, wrong, cut.text).reason == "empty response"
    with LLMServer(BANK, theta=0.5, seed=3, reasoning="think_open") as opened:
        prompt = bank.prompt(wrong)
        # no tag at all in a reply cut off before its closing tag: only the client's setting can tell
        assert client_for(opened).complete(prompt, max_tokens=50).text.endswith(opened.llm.draft(wrong))
        told = client_for(opened, inline_reasoning="opened")
        cut = told.complete(prompt, max_tokens=50)
        assert cut.text == "" and cut.reasoning.endswith(opened.llm.draft(wrong)) and cut.truncated
        right = an_item(opened, correct=True)
        whole = told.complete(bank.prompt(right), max_tokens=10240)
        assert _grade(bank, right, whole.text).correct and "</think>" not in whole.text
        off = client_for(opened, inline_reasoning="off").complete(bank.prompt(right), max_tokens=10240)
        assert "</think>" in off.text and off.reasoning is None
    with pytest.raises(ValueError, match="inline_reasoning"):
        OpenAIChatClient("m", base_url="http://127.0.0.1:9/v1", inline_reasoning="maybe")


def test_split_inline_reasoning():
    from catengine.clients.base import split_inline_reasoning as split

    assert split("<think>\nA $\\boxed{1}$\n</think>\n\nB $\\boxed{2}$") == ("B $\\boxed{2}$", "A $\\boxed{1}$")
    assert split("  A\n</think>\n\nB") == ("B", "A")                     # opened by the chat template
    assert split("\n\n</think>\n\nB") == ("B", None)                     # empty thinking
    assert split("<think>\n\n</think>\n\nB") == ("B", None)
    assert split("<think>\nA $\\boxed{1}$") == ("", "A $\\boxed{1}$")     # cut off inside the thinking
    assert split("<think>A</think>") == ("", "A")                         # nothing after the thinking
    assert split("<thinking>A</thinking>B") == ("B", "A") and split("[THINK]A[/THINK]B") == ("B", "A")
    assert split("<seed:think>A</seed:think>B") == ("B", "A")
    assert split("plain $\\boxed{3}$") == ("plain $\\boxed{3}$", None)
    assert split("A plain reply", "opened") == ("", "A plain reply")
    assert split("<think>A</think>B", "off") == ("<think>A</think>B", None)
    assert split("") == ("", None)


def test_reasoning_field_names_and_content_parts(srv, bank):
    item = bank.item_ids[3]
    plain = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    shapes = [
        ({"message": {"reasoning_content": None, "reasoning": "R"}}, plain.text, "R"),   # Ollama, newer vLLM
        ({"message": {"reasoning_content": "R", "reasoning": "R"}}, plain.text, "R"),     # both: once
        ({"message": {"thinking": "R"}}, plain.text, "R"),
        ({"message": {"reasoning": "R", "content": "<think>S</think>B"}}, "B", "R\n\nS"),
        ({"message": {"reasoning_details": [{"type": "reasoning.text", "text": "R"}]}}, plain.text, "R"),  # OpenRouter
        ({"message": {"content": [{"type": "thinking", "thinking": [{"type": "text", "text": "R"}]},   # Magistral
                                  {"type": "text", "text": "B"}]}}, "B", "R"),
        ({"message": {"content": [{"type": "text", "text": "A"}, {"type": "text", "text": "B"}]}}, "AB", None),
    ]
    for patch, text, reasoning in shapes:
        srv.inject("patch", patch=patch)
        completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
        assert (completion.text, completion.reasoning) == (text, reasoning), patch
        assert completion.completion_tokens == plain.completion_tokens and completion.attempts == 1


def test_a_reply_without_usage_has_unknown_completion_tokens(srv, bank):
    """No ``usage`` (or ``usage: null``): the completion tokens, the CoT length of a LaRT bank, are
    unknown (None), never guessed; the budget charges the worst case; the client warns once."""
    from catengine.clients.openai_chat import MissingUsageWarning

    item = bank.item_ids[3]
    budget = Budget(max_completion_tokens=10**6)
    client = client_for(srv, budget=budget)
    srv.inject("patch", patch={"usage": "__delete__"})
    srv.inject("patch", patch={"usage": None})
    with pytest.warns(MissingUsageWarning, match="reports no token usage") as caught:
        first = client.complete(bank.prompt(item), max_tokens=5000)
        second = client.complete(bank.prompt(item), max_tokens=5000)
    assert len(caught) == 1 and srv.base_url in str(caught[0].message)
    for completion in (first, second):
        assert completion.completion_tokens is None and completion.prompt_tokens is None
        assert completion.finish_reason == "stop" and completion.text and completion.attempts == 1
    assert budget.spent.completion_tokens == 2 * 5000
    # no finish reason and no usage: nothing says the reply was cut
    srv.inject("patch", patch={"usage": None, "choice": {"finish_reason": None}})
    assert client.complete(bank.prompt(item), max_tokens=5000).finish_reason is None


def test_usage_details_null_and_reasoning_counted_outside_completion_tokens(srv, bank):
    item = bank.item_ids[3]
    plain = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    cases = [
        ({"completion_tokens_details": None}, plain.completion_tokens, None),
        ({"completion_tokens_details": {"reasoning_tokens": None, "audio_tokens": 0}}, plain.completion_tokens, None),
        # xAI: total = prompt + completion + reasoning, the reasoning outside completion_tokens
        ({"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 330,
          "completion_tokens_details": {"reasoning_tokens": 303}}, 310, 303),
        # a Gemini proxy: no visible output, the thinking counted apart only
        ({"prompt_tokens": 21, "completion_tokens": 0, "total_tokens": 81,
          "completion_tokens_details": {"reasoning_tokens": 60}}, 60, 60),
        # OpenAI: reasoning inside completion_tokens
        ({"prompt_tokens": 20, "completion_tokens": 310, "total_tokens": 330,
          "completion_tokens_details": {"reasoning_tokens": 303}}, 310, 303),
        # only the total and the prompt
        ({"prompt_tokens": 20, "completion_tokens": "__delete__", "total_tokens": 330}, 310, None),
    ]
    for usage, tokens, reasoning in cases:
        srv.inject("patch", patch={"usage": usage})
        completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
        assert (completion.completion_tokens, completion.reasoning_tokens) == (tokens, reasoning), usage


@pytest.mark.parametrize("reported, kept", [(None, None), ("eos", "eos"), ("stop_sequence", "stop_sequence"),
                                            ("end_turn", "end_turn"), ("content_filter", "content_filter"),
                                            ("max_tokens", "length"), ("MAX_TOKENS", "length"),
                                            ("model_length", "length"), ({"type": "length", "length": 9}, "length")])
def test_finish_reasons_are_kept_and_every_output_cap_is_length(srv, bank, reported, kept):
    srv.inject("patch", patch={"choice": {"finish_reason": reported if reported is not None else "__delete__"}})
    completion = client_for(srv).complete(bank.prompt(bank.item_ids[3]), max_tokens=10240)
    assert completion.finish_reason == kept and completion.truncated == (kept == "length")
    assert completion.attempts == 1 and completion.text


def test_no_finish_reason_at_the_output_cap_is_a_length_stop(srv, bank):
    item = an_item(srv, longer_than=300)
    srv.inject("patch", patch={"choice": {"finish_reason": None}})
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=200)
    assert completion.finish_reason == "length" and completion.truncated and completion.completion_tokens == 200


@pytest.mark.parametrize("reason", ["abort", "error", "insufficient_system_resource"])
def test_a_generation_the_server_ended_itself_is_retried(srv, bank, reason):
    """vLLM and SGLang end an aborted request with ``finish_reason: "abort"`` in a 200 reply,
    OpenRouter a provider failure with ``"error"``, DeepSeek an overload with
    ``"insufficient_system_resource"``: not the model's answer, so retried like a server error."""
    item = bank.item_ids[5]
    srv.inject("patch", patch={"choice": {"finish_reason": reason}})
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    assert completion.attempts == 2 and completion.finish_reason == "stop" and srv.counts[item] == 2
    srv.reset_counts()
    srv.inject("patch", times=None, patch={"choice": {"finish_reason": reason}})
    budget = Budget(max_completion_tokens=10**6)
    with pytest.raises(EndpointError) as info:
        client_for(srv, max_retries=3, budget=budget).complete(bank.prompt(item), max_tokens=10240)
    assert info.value.attempts == 4 and repr(reason) in info.value.last_error
    assert srv.base_url in str(info.value) and "not the model's answer" in str(info.value)
    # the tokens the failed generations report are charged
    assert budget.spent.completion_tokens == 4 * srv.llm.cot_length(item)


def test_an_openrouter_error_choice_names_its_status(srv, bank):
    srv.inject("patch", times=None, patch={"choice": {"finish_reason": "error", "error": {
        "code": 400, "message": "Provider rejected the request"}}})
    with pytest.raises(EndpointError, match="Provider rejected the request") as info:
        client_for(srv).complete(bank.prompt(bank.item_ids[5]), max_tokens=10240)
    assert info.value.attempts == 1 and "not retried" in str(info.value)


def test_a_refusal_is_a_completion_without_text(srv, bank):
    srv.inject("patch", patch={"message": {"content": None, "refusal": "I'm sorry, I can't help with that."}})
    completion = client_for(srv).complete(bank.prompt(bank.item_ids[6]), max_tokens=10240)
    assert completion.text == "" and completion.refusal == "I'm sorry, I can't help with that."
    assert completion.attempts == 1 and completion.as_record()["refusal"] == completion.refusal
    assert _grade(bank, bank.item_ids[6], completion.text).reason == "empty response"


@pytest.mark.parametrize("error, retried", [
    ({"error": {"message": "Provider returned error", "code": 502}}, True),              # OpenRouter
    ({"error": {"message": "Rate limit exceeded", "code": "429"}}, True),
    ({"error": {"message": "slow down", "type": "rate_limit_exceeded"}}, True),
    ({"object": "error", "message": "engine overloaded", "type": "ServiceUnavailableError", "code": 503}, True),  # vLLM
    ({"error": {"message": "This model's maximum context length is 4096 tokens", "code": 400}}, False),
    ({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": 429}}, False),
])
def test_a_200_reply_that_is_an_error_object(srv, bank, error, retried):
    item = bank.item_ids[7]
    message = (error.get("error") or error)["message"]
    srv.inject("body", body=error)
    if retried:
        assert client_for(srv).complete(bank.prompt(item), max_tokens=10240).attempts == 2
        srv.reset_counts()
        srv.inject("body", times=None, body=error)
    with pytest.raises(EndpointError) as info:
        client_for(srv, max_retries=2).complete(bank.prompt(item), max_tokens=10240)
    assert message in info.value.last_error and "error object" in info.value.last_error
    assert info.value.attempts == (3 if retried else 1) == srv.counts[item]
    assert info.value.endpoint == f"{srv.base_url}/chat/completions"


def test_an_error_object_naming_no_status_is_retried_a_bounded_number_of_times(srv, bank):
    srv.inject("body", times=None, body={"error": "upstream failed"})
    with pytest.raises(EndpointError, match="upstream failed") as info:
        client_for(srv, max_retries=10, malformed_retries=2).complete(bank.prompt(bank.item_ids[7]), max_tokens=100)
    assert info.value.attempts == 3


NGINX_502 = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway</h1>"
             "</center>\r\n<hr><center>nginx/1.18.0 (Ubuntu)</center>\r\n</body>\r\n</html>\r\n")


@pytest.mark.parametrize("status", [502, 503, 504])
def test_an_html_error_page_from_a_reverse_proxy_is_retried_and_named(srv, bank, status):
    page = NGINX_502.replace("502 Bad Gateway", f"{status} Service Error")
    srv.inject("body", status=status, body=page, content_type="text/html")
    assert client_for(srv).complete(bank.prompt(bank.item_ids[8]), max_tokens=10240).attempts == 2
    srv.inject("body", status=status, times=None, body=page, content_type="text/html")
    with pytest.raises(EndpointError) as info:
        client_for(srv, max_retries=1).complete(bank.prompt(bank.item_ids[8]), max_tokens=10240)
    error = info.value.last_error
    assert f"HTTP {status}" in error and f"'{status} Service Error'" in error and "<" not in error
    assert info.value.attempts == 2


def test_a_200_html_page_is_malformed_and_the_message_suggests_the_base_url(srv, bank):
    srv.inject("body", times=None, content_type="text/html",
               body="<!DOCTYPE html><html><head><title>Open WebUI</title></head><body><div id=app></div></body></html>")
    with pytest.raises(EndpointError, match="HTML page 'Open WebUI'") as info:
        client_for(srv).complete(bank.prompt(bank.item_ids[8]), max_tokens=10240)
    assert "/v1" in info.value.last_error and info.value.attempts == 3


@pytest.mark.parametrize("seconds_ahead, wait", [(3, (1.5, 4.0)), (-30, (0.0, 0.5))])
def test_retry_after_as_an_http_date_end_to_end(srv, bank, seconds_ahead, wait):
    """``Retry-After: <HTTP date>`` (one-second resolution): the retry waits until then; a date in
    the past asks for no wait."""
    import email.utils

    when = email.utils.formatdate(time.time() + seconds_ahead, usegmt=True)
    srv.inject("429", retry_after=when)
    completion = client_for(srv).complete(bank.prompt(bank.item_ids[9]), max_tokens=10240)
    first, second = srv.requests
    assert completion.attempts == 2 and wait[0] <= second.at - first.at < wait[1]
    srv.reset_counts()
    srv.inject("status", status=503, retry_after=email.utils.formatdate(time.time() + 2, usegmt=True))
    client_for(srv).complete(bank.prompt(bank.item_ids[9]), max_tokens=10240)
    first, second = srv.requests
    assert second.at - first.at >= 0.9


@pytest.mark.parametrize("patch", [{"choices": []}, {"choices": None}, {"choices": "__delete__"}])
def test_a_reply_without_choices_is_malformed_and_retried_a_bounded_number_of_times(srv, bank, patch):
    item = bank.item_ids[10]
    srv.inject("patch", patch=patch)
    assert client_for(srv).complete(bank.prompt(item), max_tokens=10240).attempts == 2
    srv.inject("patch", times=None, patch=patch)
    with pytest.raises(EndpointError, match="no choices") as info:
        client_for(srv, max_retries=10, malformed_retries=1).complete(bank.prompt(item), max_tokens=10240)
    assert info.value.attempts == 2 and srv.base_url in str(info.value)


def test_extra_unknown_fields_are_ignored(srv, bank):
    item = bank.item_ids[11]
    plain = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    srv.inject("patch", patch={
        "system_fingerprint": "fp_x", "service_tier": "default", "prompt_logprobs": None, "kv_transfer_params": None,
        "provider": "Example", "usage": {"prompt_tokens_details": {"cached_tokens": 3}, "cost": 0.001},
        "choice": {"stop_reason": 151643, "native_finish_reason": "stop", "matched_stop": 151643,
                   "message": {"tool_calls": [], "annotations": [], "audio": None, "function_call": None}}})
    completion = client_for(srv).complete(bank.prompt(item), max_tokens=10240)
    assert completion.as_record() | {"latency_s": 0} == plain.as_record() | {"latency_s": 0}


def test_a_reply_sent_as_an_event_stream_is_put_together(srv, bank):
    def chunk(delta, finish=None, usage=None):
        data = {"id": "c", "object": "chat.completion.chunk", "model": srv.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return "data: " + json.dumps(data | ({"usage": usage} if usage else {})) + "\n\n"

    stream = (chunk({"role": "assistant", "content": ""}) + chunk({"reasoning_content": "Let me "})
              + chunk({"reasoning_content": "think."}) + chunk({"content": "The answer is "})
              + chunk({"content": "$\\boxed{3}$"}, "stop", {"prompt_tokens": 5, "completion_tokens": 9,
                                                            "total_tokens": 14}) + "data: [DONE]\n\n")
    srv.inject("body", body=stream, content_type="text/event-stream")
    completion = client_for(srv).complete(bank.prompt(bank.item_ids[12]), max_tokens=10240)
    assert (completion.text, completion.reasoning, completion.finish_reason) == ("The answer is $\\boxed{3}$",
                                                                               "Let me think.", "stop")
    assert completion.completion_tokens == 9 and completion.attempts == 1
    # a JSON reply with an event stream's terminator glued on
    whole = {"choices": [{"index": 0, "message": {"content": "B"}, "finish_reason": "stop"}],
             "usage": {"completion_tokens": 1}}
    srv.inject("body", body=json.dumps(whole) + "\n\ndata: [DONE]\n\n", content_type="text/event-stream")
    assert client_for(srv).complete(bank.prompt(bank.item_ids[12]), max_tokens=10240).text == "B"
    # an error inside the stream
    srv.inject("body", times=None, body='data: {"error": {"message": "overloaded", "code": 529}}\n\n',
               content_type="text/event-stream")
    with pytest.raises(EndpointError, match="overloaded") as info:
        client_for(srv, max_retries=1).complete(bank.prompt(bank.item_ids[12]), max_tokens=10240)
    assert info.value.attempts == 2


def test_insufficient_quota_is_not_retried(srv, bank):
    srv.inject("body", status=429, times=None, body={"error": {
        "message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}})
    with pytest.raises(EndpointError, match="quota is exhausted") as info:
        client_for(srv).complete(bank.prompt(bank.item_ids[13]), max_tokens=10240)
    assert info.value.attempts == 1 and len(srv.requests) == 1


def test_parse_chat_completion_reads_each_shape():
    from catengine.clients.openai_chat import ErrorReply

    fields = parse_chat_completion(b'{"choices": [{"message": {"content": "x\\n</think>\\n\\n4"}, "finish_reason": '
                                   b'"stop"}], "usage": null}')
    assert (fields["text"], fields["reasoning"], fields["completion_tokens"]) == ("4", "x", None)
    fields = parse_chat_completion(b'{"choices": [{"text": "5", "finish_reason": "eos_token"}]}')
    assert (fields["text"], fields["finish_reason"]) == ("5", "eos_token")
    with pytest.raises(ErrorReply, match="code 502") as info:
        parse_chat_completion(b'{"error": {"message": "Provider returned error", "code": 502}}')
    assert info.value.status == 502 and info.value.retryable
    with pytest.raises(MalformedReply, match="HTML page '502 Bad Gateway'"):
        parse_chat_completion(NGINX_502)
    with pytest.raises(MalformedReply, match="not valid JSON"):
        parse_chat_completion(b'{"choices": []} trailing')


def test_a_run_reads_the_answer_after_the_thinking(tmp_path):
    """``run_model`` against a reasoning model that writes its thinking inline, with an output cap
    that cuts some replies inside their thinking: each complete reply is graded on its answer (the
    verdict is the simulated LLM's truth), each cut one is an empty response (its thinking states a
    draft of the right answer, never graded), and the log keeps the thinking apart."""
    from catengine import open_item_bank
    from catengine.runner import run_model
    from catengine.session.log import read_log
    from catengine.stopping import MaxItems

    bank = open_item_bank(BANK)
    with LLMServer(bank, theta=0.0, seed=11, reasoning="think") as reasoner:
        client = client_for(reasoner)
        result = run_model(bank, client, log=tmp_path / "run.jsonl", concurrency=4, stopping=MaxItems(30), seed=2,
                           max_tokens=2500)
        truth = {i: reasoner.llm.truth(i) for i in bank.item_ids}
    assert result.completed, result.error
    records = [e for e in read_log(tmp_path / "run.jsonl").events if e.get("event") == "record"]
    cut = [r for r in records if r["evidence"]["finish_reason"] == "length"]
    whole = [r for r in records if r["evidence"]["finish_reason"] == "stop"]
    assert cut and whole and len(cut) + len(whole) == 30
    assert all(r["evidence"]["text"] == "" and r["evidence"]["reason"] == "empty response" and r["correct"] == 0
               and r["evidence"]["reasoning"] for r in cut)
    assert all(bool(r["correct"]) == truth[r["item"]] and "think>" not in r["evidence"]["text"] for r in whole)
    assert all(r["evidence"]["completion_tokens"] == 2500 for r in cut)


def test_a_run_without_usage_records_unknown_cot_lengths(tmp_path):
    from catengine import open_item_bank
    from catengine.clients.openai_chat import MissingUsageWarning
    from catengine.runner import run_model
    from catengine.stopping import MaxItems

    bank = open_item_bank(BANK)
    with LLMServer(bank, theta=0.5, seed=3) as server:
        server.inject("patch", times=None, patch={"usage": None})
        with pytest.warns(MissingUsageWarning):
            result = run_model(bank, client_for(server), log=tmp_path / "run.jsonl", concurrency=2,
                               stopping=MaxItems(6), seed=1)
    assert result.completed and result.progress.items == 6, result.error
    assert all(rec.cot_length is None for rec in result.session.history)
    assert result.progress.completion_tokens == 0


def test_inspect_client_reads_inline_reasoning_like_the_openai_client():
    pytest.importorskip("inspect_ai")
    from inspect_ai.model import ModelOutput, get_model

    from catengine.clients import InspectModelClient

    replies = {"opened": "Draft $\\boxed{7}$.\n</think>\n\nSo $\\boxed{3}$.", "cut": "<think>\nDraft $\\boxed{7}$"}

    def outputs(messages, tools, tool_choice, config):
        return ModelOutput.from_content("mockllm", replies[messages[-1].text])

    with InspectModelClient(get_model("mockllm/model", custom_outputs=outputs, memoize=False)) as client:
        opened = client.complete("opened", max_tokens=100)
        assert (opened.text, opened.reasoning) == ("So $\\boxed{3}$.", "Draft $\\boxed{7}$.")
        cut = client.complete("cut", max_tokens=100)
        assert (cut.text, cut.reasoning) == ("", "Draft $\\boxed{7}$")
    with InspectModelClient(get_model("mockllm/model", custom_outputs=outputs, memoize=False),
                            inline_reasoning="off") as raw:
        assert raw.complete("cut", max_tokens=100).text == replies["cut"]
