"""An agent of your own, deployed with harness-r1: a rule-based WebShop shopper (a plain Python
function in the model's seat) that takes the daemon's signed overlays at episode boundaries
and sends every episode it plays to the daemon.

    python examples/embedding/my_agent.py --settings agent.yaml --episodes 10

The settings file is the daemon's (or a copy naming the same brokers, topics and keys_dir):
see examples/embedding/README.md and docs/embedding.md. One line per episode on stdout:
`episode N task=ID overlay=ID success=BOOL reward=R steps=S`. `--episodes 0` serves until
Ctrl-C (exit status 130).
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from harness_r1.agent import ChatMessage, build_agent, callable_policy

#: WebShop's pages list what can be done next under this heading (its prompter's format)
AVAILABLE = "Available Actions:"
INSTRUCTION = re.compile(r"Instruction: \[SEP\] (.*?) \[SEP\]", re.DOTALL)
PRODUCT = re.compile(r"click\[b0[0-9a-z]{8}\]")
PAGE_BUTTONS = {
    "click[back to search]",
    "click[next >]",
    "click[< prev]",
    "click[description]",
    "click[features]",
    "click[reviews]",
    "click[buy now]",
}


def available_actions(text: str) -> list[str]:
    """The actions listed at the end of the newest observation."""
    if AVAILABLE not in text:
        return []
    listing = text.rsplit(AVAILABLE, 1)[1]
    return [line.strip() for line in listing.splitlines() if line.strip().endswith("]")]


def shopper(messages: list[ChatMessage]) -> str:
    """Search with the instruction's words, open the first result, pick every option the
    instruction names, buy. Deterministic; it reads only what the model would read."""
    instruction_match = INSTRUCTION.search(messages[1]["content"])
    instruction = instruction_match.group(1) if instruction_match else ""
    latest = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    actions = available_actions(latest)
    done = {m["content"] for m in messages if m["role"] == "assistant"}
    if any(action.startswith("search[") for action in actions):
        return f"Action: search[{instruction}]"
    if "click[buy now]" in actions:
        for action in actions:
            option = action[len("click[") : -1]
            wanted = action not in PAGE_BUTTONS and option in instruction.lower()
            if wanted and f"Action: {action}" not in done:
                return f"Action: {action}"
        return "Action: click[buy now]"
    products = [action for action in actions if PRODUCT.fullmatch(action)]
    return f"Action: {products[0] if products else 'click[back to search]'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", required=True, help="settings file (the daemon's format)")
    parser.add_argument("--agent-id", default="my-agent-1", help="unique in its pool")
    parser.add_argument("--split", default="fixed_heldout", help="WebShop split to play")
    parser.add_argument("--episodes", type=int, default=10, help="0: until Ctrl-C")
    parser.add_argument("--pause", type=float, default=0.0, help="seconds between episodes")
    args = parser.parse_args(argv)

    # model_id and version name this target in every trajectory: the daemon batches failures
    # and keeps canary baselines per target, so a new version of the rules gets a new version
    policy = callable_policy(shopper, model_id="rules-shopper", version="1")
    with build_agent(args.settings, policy, "webshop", agent_id=args.agent_id) as agent:
        tasks = agent.tasks(args.split)
        played = 0
        try:
            while args.episodes == 0 or played < args.episodes:
                task = tasks[played % len(tasks)]
                # one episode per call: the overlay in force when it starts is the one it runs
                (trajectory,) = agent.run([(task, played)])
                outcome = trajectory.outcome
                print(
                    f"episode {played} task={task.task_id} overlay={trajectory.harness_version} "
                    f"success={outcome.success} reward={outcome.reward:.2f} steps={outcome.steps}",
                    flush=True,
                )
                played += 1
                time.sleep(args.pause)
        except KeyboardInterrupt:
            print(f"stopped after {played} episodes", file=sys.stderr)
            return 130
        if agent.publisher.failed:
            print(f"{agent.publisher.failed} trajectories not published", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
