"""A Python function tool of the support agent: Troupe runs it with python3, sends the arguments as JSON
on stdin and reads the JSON result from stdout. Plain Python, no Troupe import needed."""

RATES_EUR_PER_KG = {"france": 2.1, "germany": 2.4, "spain": 2.6, "italy": 2.6}
BASE_EUR = 4.5


def quote(destination, weight_kg):
    rate = RATES_EUR_PER_KG.get(destination.strip().lower())
    if rate is None:
        raise ValueError(f"we do not ship to {destination}")
    if weight_kg <= 0:
        raise ValueError("the weight must be positive")
    return {"destination": destination, "weight_kg": weight_kg, "price_eur": round(BASE_EUR + rate * weight_kg, 2)}
