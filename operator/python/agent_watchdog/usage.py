"""Usage and run budgets on the sandbox's side (usage.ts).

The sandbox reports what its attempt has spent in every heartbeat (``status.heartbeat.usage``:
input and output tokens, cost, tool calls, model); the operator adds ended attempts into
``status.spent`` and stops the run for a person (BudgetExhausted) at the first report at or over a
limit of ``spec.budget``. What the SDK adds here is cooperative: it refuses to start more work once
the run's spending, as it sees it, has reached a limit, so that an agent stops before the operator
has to kill it. The operator never depends on it.

Rules the API server enforces, and so the meter keeps: within an attempt no figure goes down (a CEL
rule refuses a lowering write), so the meter only adds non-negative amounts and caps at the largest
value the CRD admits; and once an attempt has reported a cost, every later report carries one.

Cost is money, so it is never a float: decimal strings (``decimal.Decimal`` in, ``str`` out),
added as integers scaled by 10^18, exactly as the operator adds them.

Which cost the operator counts: the reported ``cost`` when there is one; otherwise the tokens
priced by ``spec.budget.prices`` for the reported ``model``. The meter therefore leaves ``cost`` out
for as long as every token it recorded came without a cost and with one model (or none), and the
operator prices them (install default prices included). From the first report that carries a cost,
or names a second model, it reports a cost for the whole attempt: the costs given, plus the tokens
recorded without one priced by the run's own ``spec.budget.prices`` when they were recorded
(tokens of a model the run does not price count nothing towards it).
"""

from __future__ import annotations

import decimal
import re
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import BudgetBreach, SpendingLimit

__all__ = [
    "SPENDING_LIMITS",
    "BudgetBreach",
    "BudgetView",
    "Spending",
    "UsageMeter",
    "format_cost",
    "parse_cost",
]

#: The limits the SDK checks: all but the wall clock, which the operator measures on the API
#: server's clock.
SPENDING_LIMITS: tuple[SpendingLimit, ...] = ("tokens", "inputTokens", "outputTokens", "cost", "toolCalls")

#: Fraction digits of the scaled integers (operator/api/decimal.ts).
_DIGITS = 18
SCALE = 10**_DIGITS
#: The largest count the CRD admits (2^53 - 1).
MAX_COUNT = 2**53 - 1
#: The largest cost the CRD admits (18 digits either side of the point), scaled.
MAX_COST = 10**36 - 1
MAX_MODEL_CHARS = 256

Cost = Union[decimal.Decimal, str, int, float]

_DECIMAL = re.compile(r"^([0-9]+)(?:[.]([0-9]*))?$|^()[.]([0-9]+)$")
_SPEC_DECIMAL = re.compile(r"^([0-9]+)(?:[.]([0-9]{1,18}))?$")


@dataclass(frozen=True)
class Spending:
    """The run's spending as the SDK sees it: status.spent plus this attempt's usage."""

    input_tokens: int
    output_tokens: int
    #: input_tokens + output_tokens.
    tokens: int
    #: In the budget's currency (0 when nothing is known to have cost anything).
    cost: decimal.Decimal
    tool_calls: int


def _capped_count(n: int) -> int:
    return min(n, MAX_COUNT)


def _capped_cost(c: int) -> int:
    return min(c, MAX_COST)


def format_cost(scaled: int) -> str:
    """A scaled value as the shortest decimal string: 3 * 10**17 -> "0.3"."""
    whole, fraction = divmod(scaled, SCALE)
    digits = str(fraction).rjust(_DIGITS, "0").rstrip("0")
    return f"{whole}.{digits}" if digits else str(whole)


def parse_cost(value: Cost) -> int:
    """A cost as an integer scaled by 10^18. A string must be a plain decimal ("0.0123", "12"); a
    Decimal, int or float is taken as the decimal it prints as (0.1 is 0.1). More than 18 fraction
    digits round up: a budget is never undercounted. Negative, non-finite and malformed values
    raise ValueError; other types TypeError."""
    if isinstance(value, bool):
        raise TypeError("record_usage: cost must be a decimal, not a bool")
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"record_usage: cost must be a finite amount, not {value}")
        value = decimal.Decimal(repr(value))
    if isinstance(value, int):
        value = decimal.Decimal(value)
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise ValueError(f"record_usage: cost must be a finite amount, not {value}")
        if value < 0:
            raise ValueError(f"record_usage: cost must be a non-negative amount, not {value}")
        if value == 0:
            return 0
        if value >= SCALE:
            return MAX_COST
        text = format(value, "f")
    elif isinstance(value, str):
        text = value.strip()
    else:
        raise TypeError(f'record_usage: cost must be a decimal such as Decimal("0.0123") or "0.0123", not {type(value).__name__}')
    match = _DECIMAL.match(text)
    if not match:
        raise ValueError(f'record_usage: cost must be a non-negative decimal such as "0.0123", not {value!r}')
    whole = int(match.group(1) or match.group(3) or "0")
    fraction = match.group(2) if match.group(1) is not None else match.group(4)
    fraction = fraction or ""
    kept = int(fraction[:_DIGITS].ljust(_DIGITS, "0"))
    round_up = 1 if re.search(r"[1-9]", fraction[_DIGITS:]) else 0
    return _capped_cost(whole * SCALE + kept + round_up)


def _decimal_of(value: Any) -> Optional[int]:
    """A decimal string of a spec or status (a price, a limit, spent.cost), scaled; None otherwise."""
    if not isinstance(value, str):
        return None
    match = _SPEC_DECIMAL.match(value)
    if not match:
        return None
    return int(match.group(1)) * SCALE + int((match.group(2) or "").ljust(_DIGITS, "0"))


def _count_of(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT else None


def model_name(value: Any) -> Optional[str]:
    """A model name as the CRD admits it, or None."""
    return value if isinstance(value, str) and 0 < len(value) <= MAX_MODEL_CHARS else None


def price_tokens(prices: list[dict[str, str]], model: Optional[str], input_tokens: int, output_tokens: int) -> Optional[int]:
    """The cost of tokens at a model's price (per million tokens, exactly, as the operator prices
    them), scaled; None when the model is not priced."""
    if model is None:
        return None
    price = next((p for p in prices if p.get("model") == model), None)
    if price is None:
        return None

    def per_token(per_million: Any) -> int:
        return (_decimal_of(per_million) or 0) // 1_000_000

    return input_tokens * per_token(price.get("inputPerMillion")) + output_tokens * per_token(price.get("outputPerMillion"))


def _token_count(value: Any, field: str) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"record_usage: {field} must be a non-negative integer, not {value!r}")
    return _capped_count(value)


class UsageMeter:
    """The attempt's running totals. Every change only adds, so every report it produces is at
    least the one before it (what the API server requires within an attempt). Not thread-safe on
    its own: the Sandbox holds a lock around it."""

    def __init__(self) -> None:
        self.input_tokens = 0
        self.output_tokens = 0
        self.tool_calls = 0
        #: Costs given with reports, scaled.
        self._given = 0
        #: Tokens reported without a cost, priced by the run's own prices when they were recorded.
        self._priced = 0
        #: Whether the report carries a cost (from the first report that gave one, or named a
        #: second model, on).
        self._costed = False
        #: The model reported: the first one named.
        self.model: Optional[str] = None
        self._unpriced: set[str] = set()
        self._told: set[str] = set()

    def record(
        self,
        prices: list[dict[str, str]],
        input_tokens: Any = 0,
        output_tokens: Any = 0,
        cost: Optional[Cost] = None,
        model: Optional[str] = None,
    ) -> list[str]:
        """Adds one call's usage (validated first: nothing is added when anything is malformed).
        Returns the names of models newly found without a price while a cost is reported."""
        i = _token_count(input_tokens, "input_tokens")
        o = _token_count(output_tokens, "output_tokens")
        c = None if cost is None else parse_cost(cost)
        if model is not None and model_name(model) is None:
            raise ValueError(f"record_usage: model must be a name of 1 to {MAX_MODEL_CHARS} characters")
        self.input_tokens = _capped_count(self.input_tokens + i)
        self.output_tokens = _capped_count(self.output_tokens + o)
        if c is not None:
            self._given = _capped_cost(self._given + c)
            self._costed = True
        elif i + o > 0:
            # Tokens of a second model cannot be priced by one model name: from here on the
            # sandbox reports the cost itself.
            if model is not None and self.model is not None and model != self.model:
                self._costed = True
            named = model if model is not None else self.model
            price = price_tokens(prices, named, i, o)
            if price is not None:
                self._priced = _capped_cost(self._priced + price)
            elif named is not None:
                self._unpriced.add(named)
        if self.model is None:
            self.model = model
        if not self._costed:
            return []
        fresh = sorted(self._unpriced - self._told)
        self._told.update(fresh)
        return fresh

    def resume(self, usage: Any) -> None:
        """Starts from what this same attempt already reported (its own heartbeat's usage, found at
        start): a report may not go below it. Read leniently; garbage counts as 0."""
        if not isinstance(usage, dict):
            return
        self.input_tokens = max(self.input_tokens, _count_of(usage.get("inputTokens")) or 0)
        self.output_tokens = max(self.output_tokens, _count_of(usage.get("outputTokens")) or 0)
        self.tool_calls = max(self.tool_calls, _count_of(usage.get("toolCalls")) or 0)
        if usage.get("cost") is not None:
            self._costed = True
            cost = _decimal_of(usage.get("cost"))
            if cost is not None and cost > self._given:
                self._given = _capped_cost(cost)
        if self.model is None:
            self.model = model_name(usage.get("model"))

    def tool_call(self) -> None:
        """One more tool call made by this attempt."""
        self.tool_calls = _capped_count(self.tool_calls + 1)

    def report(self) -> dict[str, Any]:
        """What status.heartbeat.usage says: zeros before anything is spent."""
        usage: dict[str, Any] = {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens}
        if self._costed:
            usage["cost"] = format_cost(_capped_cost(self._given + self._priced))
        usage["toolCalls"] = self.tool_calls
        if self.model is not None:
            usage["model"] = self.model
        return usage

    def figures(self, prices: list[dict[str, str]]) -> tuple[int, int, int, int]:
        """(input tokens, output tokens, cost scaled, tool calls), with the cost as the operator
        will count it given the run's prices now."""
        if self._costed:
            cost = _capped_cost(self._given + self._priced)
        else:
            cost = price_tokens(prices, self.model, self.input_tokens, self.output_tokens) or 0
        return (self.input_tokens, self.output_tokens, cost, self.tool_calls)


class BudgetView:
    """The budget of a run and what its ended attempts spent, read leniently from the run as the
    SDK finds it and watches it: the effective limits the operator publishes in status.budget (they
    include the install's defaults), else the run's own spec.budget; the prices of spec.budget; and
    status.spent. Anything unreadable counts as absent: the operator, not the SDK, enforces."""

    def __init__(self, attempt: int) -> None:
        self._attempt = attempt
        self._limits: dict[str, Any] = {}
        self.prices: list[dict[str, str]] = []
        self._spent = (0, 0, 0, 0)
        self._through = 0

    @property
    def limited(self) -> bool:
        return any(self._limits.get(limit) is not None for limit in SPENDING_LIMITS)

    def observe(self, run: Any) -> None:
        run = run if isinstance(run, dict) else {}
        spec = run.get("spec") if isinstance(run.get("spec"), dict) else {}
        status = run.get("status") if isinstance(run.get("status"), dict) else {}
        spec_budget = spec.get("budget") if isinstance(spec.get("budget"), dict) else {}
        source = status.get("budget") if isinstance(status.get("budget"), dict) else spec_budget
        limits: dict[str, Any] = {}
        for key in ("tokens", "inputTokens", "outputTokens", "toolCalls"):
            value = _count_of(source.get(key))
            if value is not None:
                limits[key] = value
        cost = source.get("cost") if isinstance(source.get("cost"), dict) else {}
        amount = _decimal_of(cost.get("amount"))
        if amount is not None:
            currency = cost.get("currency")
            limits["cost"] = (amount, f"{cost.get('amount')}{' ' + currency if isinstance(currency, str) else ''}")
        self._limits = limits
        prices = spec_budget.get("prices") if isinstance(spec_budget.get("prices"), list) else []
        self.prices = [
            {"model": p["model"], "inputPerMillion": p["inputPerMillion"], "outputPerMillion": p["outputPerMillion"]}
            for p in prices
            if isinstance(p, dict)
            and isinstance(p.get("model"), str)
            and _decimal_of(p.get("inputPerMillion")) is not None
            and _decimal_of(p.get("outputPerMillion")) is not None
        ]
        spent = status.get("spent") if isinstance(status.get("spent"), dict) else {}
        self._spent = (
            _count_of(spent.get("inputTokens")) or 0,
            _count_of(spent.get("outputTokens")) or 0,
            _decimal_of(spent.get("cost")) or 0,
            _count_of(spent.get("toolCalls")) or 0,
        )
        self._through = _count_of(spent.get("throughAttempt")) or 0

    def spending(self, own: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
        """status.spent plus this attempt's usage, unless status.spent already holds this attempt."""
        if self._through >= self._attempt:
            return self._spent
        si, so, sc, st = self._spent
        oi, oo, oc, ot = own
        return (_capped_count(si + oi), _capped_count(so + oo), sc + oc, _capped_count(st + ot))

    def breaches(self, spending: tuple[int, int, int, int]) -> list[BudgetBreach]:
        """The limits the spending has reached, in the order the operator names them."""
        inp, out, cost, tools = spending
        limits = self._limits
        found: list[BudgetBreach] = []

        def count(limit: SpendingLimit, used: int, what: str, unit: str) -> None:
            allowed = limits.get(limit)
            if allowed is not None and used >= allowed:
                found.append(BudgetBreach(limit, str(used), str(allowed), f"{what} budget exhausted: {used} of {allowed} {unit}"))

        count("tokens", _capped_count(inp + out), "token", "tokens spent")
        count("inputTokens", inp, "input token", "input tokens spent")
        count("outputTokens", out, "output token", "output tokens spent")
        if "cost" in limits and cost >= limits["cost"][0]:
            used = format_cost(cost)
            found.append(BudgetBreach("cost", used, format_cost(limits["cost"][0]), f"cost budget exhausted: {used} of {limits['cost'][1]} spent"))
        count("toolCalls", tools, "tool call", "tool calls made")
        return found


def spending_of(figures: tuple[int, int, int, int]) -> Spending:
    inp, out, cost, tools = figures
    return Spending(
        input_tokens=inp,
        output_tokens=out,
        tokens=_capped_count(inp + out),
        cost=decimal.Decimal(format_cost(cost)),
        tool_calls=tools,
    )
