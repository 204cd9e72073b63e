"""The harness engineer: prompt.py and engineer.py (generation backends), propose.py,
teacher.py + templates/ (offline template teacher), coldstart*.py (the cold-start dataset),
sft.py and grpo.py (TRL training, versioned adapters). torch/transformers/TRL load lazily."""
