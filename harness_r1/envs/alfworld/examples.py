"""One worked example per ALFWorld task type, for the AgentBench-style system prompt.

Why hand-written here rather than AgentBench's: AgentBench's examples use the older ALFWorld
command `put X in/on Y`; the alfworld 0.4.x games we play say `move X to Y` (and have no
`toggle`: a lamp is switched on with `use`), so its examples would teach invalid actions.
Each example below was played on a real train game: the observations are the game's own text
(with the opening banner stripped, as the env returns it) and the actions win the game. A few
examples take one exploratory detour so that the model sees searching, not only a direct plan.
The tests replay every example against its game when the data is present.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    thought: str
    action: str
    observation: str


@dataclass(frozen=True)
class Example:
    task_type: str
    #: The game it was played on, relative to the data root.
    game_file: str
    observation: str
    turns: tuple[Turn, ...]


_TRAIN = "alfworld/train"

EXAMPLES: dict[str, Example] = {
    "pick_and_place_simple": Example(
        task_type="pick_and_place_simple",
        game_file=f"{_TRAIN}/pick_and_place_simple-KeyChain-None-ArmChair-214/"
        "trial_T20190909_061209_612904/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a armchair 1, "
            "a coffeetable 1, a garbagecan 1, a shelf 2, a shelf 1, a sidetable 1, a sofa 2, "
            "and a sofa 1.\nYour task is to: put a keychain in armchair."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find a keychain, take it, and move it to the "
                "armchair 1. A keychain is likely on a sidetable or a coffeetable. I will check "
                "the sidetable 1 first.",
                "go to sidetable 1",
                "You arrive at sidetable 1. On the sidetable 1, you see a plate 2, and a "
                "remotecontrol 2.",
            ),
            Turn(
                "There is no keychain here. Next, the coffeetable 1.",
                "go to coffeetable 1",
                "You arrive at coffeetable 1. On the coffeetable 1, you see a creditcard 1, a "
                "houseplant 1, a keychain 2, a newspaper 1, a plate 1, a remotecontrol 1, a "
                "vase 1, and a wateringcan 1.",
            ),
            Turn(
                "I found keychain 2. I take it.",
                "take keychain 2 from coffeetable 1",
                "You pick up the keychain 2 from the coffeetable 1.",
            ),
            Turn(
                "Now I go to the armchair 1.",
                "go to armchair 1",
                "You arrive at armchair 1. On the armchair 1, you see nothing.",
            ),
            Turn(
                "I move the keychain 2 to the armchair 1.",
                "move keychain 2 to armchair 1",
                "You move the keychain 2 to the armchair 1.",
            ),
        ),
    ),
    "look_at_obj_in_light": Example(
        task_type="look_at_obj_in_light",
        game_file=f"{_TRAIN}/look_at_obj_in_light-Bowl-None-DeskLamp-316/"
        "trial_T20190908_230635_560113/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a bed 1, a "
            "desk 1, a drawer 2, a drawer 1, a garbagecan 1, a shelf 1, and a sidetable 1.\n"
            "Your task is to: examine the bowl with the desklamp."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find a bowl, take it, then find a desklamp and "
                "use it while holding the bowl. I will check the sidetable 1 first.",
                "go to sidetable 1",
                "You arrive at sidetable 1. On the sidetable 1, you see a alarmclock 3, a "
                "creditcard 2, a keychain 1, a pen 2, and a pencil 2.",
            ),
            Turn(
                "No bowl here. The desk 1 may have one.",
                "go to desk 1",
                "You arrive at desk 1. On the desk 1, you see a book 1, a bowl 2, a bowl 1, a "
                "cd 3, a cd 2, a cd 1, a cellphone 1, a desklamp 1, a houseplant 1, a laptop 1, "
                "a pen 3, a pen 1, and a pencil 1.",
            ),
            Turn(
                "I found bowl 2, and the desklamp 1 is here too. I take the bowl first.",
                "take bowl 2 from desk 1",
                "You pick up the bowl 2 from the desk 1.",
            ),
            Turn(
                "Holding the bowl 2, I use the desklamp 1.",
                "use desklamp 1",
                "You turn on the desklamp 1.",
            ),
        ),
    ),
    "pick_clean_then_place_in_recep": Example(
        task_type="pick_clean_then_place_in_recep",
        game_file=f"{_TRAIN}/pick_clean_then_place_in_recep-Cloth-None-Toilet-406/"
        "trial_T20190908_102709_492098/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a "
            "bathtubbasin 1, a cabinet 2, a cabinet 1, a countertop 1, a garbagecan 1, a "
            "handtowelholder 1, a sinkbasin 1, a toilet 1, a toiletpaperhanger 1, and a "
            "towelholder 1.\nYour task is to: clean some cloth and put it in toilet."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find a cloth, take it, clean it with the "
                "sinkbasin 1, then move it to the toilet 1. I will look on the countertop 1 "
                "first.",
                "go to countertop 1",
                "You arrive at countertop 1. On the countertop 1, you see a sink 1, a "
                "soapbar 1, a spraybottle 2, a toiletpaper 2, and a toiletpaper 1.",
            ),
            Turn(
                "No cloth here. The bathtubbasin 1 may have one.",
                "go to bathtubbasin 1",
                "You arrive at bathtubbasin 1. On the bathtubbasin 1, you see a cloth 3, a "
                "cloth 2, and a soapbar 3.",
            ),
            Turn(
                "I found cloth 3. I take it.",
                "take cloth 3 from bathtubbasin 1",
                "You pick up the cloth 3 from the bathtubbasin 1.",
            ),
            Turn(
                "Now I clean it at the sinkbasin 1.",
                "go to sinkbasin 1",
                "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
            ),
            Turn(
                "I clean the cloth 3 with the sinkbasin 1.",
                "clean cloth 3 with sinkbasin 1",
                "You clean the cloth 3 using the sinkbasin 1.",
            ),
            Turn(
                "The cloth 3 is clean. Now I go to the toilet 1.",
                "go to toilet 1",
                "You arrive at toilet 1. On the toilet 1, you see nothing.",
            ),
            Turn(
                "I move the cloth 3 to the toilet 1.",
                "move cloth 3 to toilet 1",
                "You move the cloth 3 to the toilet 1.",
            ),
        ),
    ),
    "pick_heat_then_place_in_recep": Example(
        task_type="pick_heat_then_place_in_recep",
        game_file=f"{_TRAIN}/pick_heat_then_place_in_recep-Apple-None-Fridge-14/"
        "trial_T20190907_085309_386416/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a cabinet 8, "
            "a cabinet 7, a cabinet 6, a cabinet 5, a cabinet 4, a cabinet 3, a cabinet 2, a "
            "cabinet 1, a coffeemachine 1, a countertop 2, a countertop 1, a fridge 1, a "
            "garbagecan 1, a microwave 1, a sinkbasin 1, a stoveburner 4, a stoveburner 3, a "
            "stoveburner 2, a stoveburner 1, and a toaster 1.\n"
            "Your task is to: heat some apple and put it in fridge."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find an apple, take it, heat it with the "
                "microwave 1, then move it to the fridge 1. An apple may be on a countertop or "
                "in the sinkbasin. I will check the countertop 1 first.",
                "go to countertop 1",
                "You arrive at countertop 1. On the countertop 1, you see a bread 1, a "
                "butterknife 1, a dishsponge 3, a egg 1, a fork 2, a fork 1, a knife 2, a "
                "ladle 2, a lettuce 1, a mug 3, a pan 1, a peppershaker 2, and a spatula 1.",
            ),
            Turn(
                "No apple here. Next, the sinkbasin 1.",
                "go to sinkbasin 1",
                "You arrive at sinkbasin 1. On the sinkbasin 1, you see a apple 2, a cup 2, "
                "and a spoon 1.",
            ),
            Turn(
                "I found apple 2. I take it.",
                "take apple 2 from sinkbasin 1",
                "You pick up the apple 2 from the sinkbasin 1.",
            ),
            Turn(
                "Now I heat it with the microwave 1.",
                "go to microwave 1",
                "You arrive at microwave 1. The microwave 1 is closed.",
            ),
            Turn(
                "I heat the apple 2 with the microwave 1.",
                "heat apple 2 with microwave 1",
                "You heat the apple 2 using the microwave 1.",
            ),
            Turn(
                "The apple 2 is hot. Now I go to the fridge 1.",
                "go to fridge 1",
                "You arrive at fridge 1. The fridge 1 is closed.",
            ),
            Turn(
                "The fridge 1 is closed, so I open it first.",
                "open fridge 1",
                "You open the fridge 1. The fridge 1 is open. In it, you see a cup 3, a egg 2, "
                "and a tomato 1.",
            ),
            Turn(
                "I move the apple 2 to the fridge 1.",
                "move apple 2 to fridge 1",
                "You move the apple 2 to the fridge 1.",
            ),
        ),
    ),
    "pick_cool_then_place_in_recep": Example(
        task_type="pick_cool_then_place_in_recep",
        game_file=f"{_TRAIN}/pick_cool_then_place_in_recep-Cup-None-SideTable-21/"
        "trial_T20190906_192855_164902/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a cabinet 4, "
            "a cabinet 3, a cabinet 2, a cabinet 1, a coffeemachine 1, a countertop 1, a "
            "diningtable 3, a diningtable 2, a diningtable 1, a drawer 1, a fridge 1, a "
            "garbagecan 1, a microwave 1, a sidetable 1, a sinkbasin 1, a stoveburner 4, a "
            "stoveburner 3, a stoveburner 2, a stoveburner 1, and a toaster 1.\n"
            "Your task is to: cool some cup and put it in sidetable."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find a cup, take it, cool it with the fridge 1, "
                "then move it to the sidetable 1. A cup may be in a cabinet or on the "
                "countertop. I will check the cabinet 1 first.",
                "go to cabinet 1",
                "You arrive at cabinet 1. The cabinet 1 is closed.",
            ),
            Turn(
                "The cabinet 1 is closed. I open it.",
                "open cabinet 1",
                "You open the cabinet 1. The cabinet 1 is open. In it, you see a bowl 1.",
            ),
            Turn(
                "No cup in the cabinet 1. Next, the countertop 1.",
                "go to countertop 1",
                "You arrive at countertop 1. On the countertop 1, you see a apple 2, a cup 1, a "
                "egg 2, a egg 1, and a saltshaker 1.",
            ),
            Turn(
                "I found cup 1. I take it.",
                "take cup 1 from countertop 1",
                "You pick up the cup 1 from the countertop 1.",
            ),
            Turn(
                "Now I cool it with the fridge 1.",
                "go to fridge 1",
                "You arrive at fridge 1. The fridge 1 is closed.",
            ),
            Turn(
                "I cool the cup 1 with the fridge 1.",
                "cool cup 1 with fridge 1",
                "You cool the cup 1 using the fridge 1.",
            ),
            Turn(
                "The cup 1 is cool. Now I go to the sidetable 1.",
                "go to sidetable 1",
                "You arrive at sidetable 1. On the sidetable 1, you see a butterknife 1, a "
                "fork 2, a fork 1, and a lettuce 1.",
            ),
            Turn(
                "I move the cup 1 to the sidetable 1.",
                "move cup 1 to sidetable 1",
                "You move the cup 1 to the sidetable 1.",
            ),
        ),
    ),
    "pick_two_obj_and_place": Example(
        task_type="pick_two_obj_and_place",
        game_file=f"{_TRAIN}/pick_two_obj_and_place-KeyChain-None-Sofa-202/"
        "trial_T20190908_102743_595985/game.tw-pddl",
        observation=(
            "You are in the middle of a room. Looking quickly around you, you see a "
            "armchair 1, a coffeetable 1, a garbagecan 1, a sidetable 1, a sofa 1, and a "
            "tvstand 1.\nYour task is to: find two keychain and put them in sofa."
        ),
        turns=(
            Turn(
                "To solve the task, I need to find two keychains and move them to the sofa 1, "
                "one at a time. I will check the sidetable 1 first.",
                "go to sidetable 1",
                "You arrive at sidetable 1. On the sidetable 1, you see a box 1, a keychain 2, "
                "a keychain 1, a statue 1, a watch 3, a watch 2, and a watch 1.",
            ),
            Turn(
                "I found two keychains. I can carry one at a time, so I take keychain 2 first.",
                "take keychain 2 from sidetable 1",
                "You pick up the keychain 2 from the sidetable 1.",
            ),
            Turn(
                "Now I go to the sofa 1.",
                "go to sofa 1",
                "You arrive at sofa 1. On the sofa 1, you see a box 2, a creditcard 2, a "
                "creditcard 1, and a pillow 1.",
            ),
            Turn(
                "I move the keychain 2 to the sofa 1.",
                "move keychain 2 to sofa 1",
                "You move the keychain 2 to the sofa 1.",
            ),
            Turn(
                "One done. I go back to the sidetable 1 for keychain 1.",
                "go to sidetable 1",
                "You arrive at sidetable 1. On the sidetable 1, you see a box 1, a keychain 1, "
                "a statue 1, a watch 3, a watch 2, and a watch 1.",
            ),
            Turn(
                "I take keychain 1.",
                "take keychain 1 from sidetable 1",
                "You pick up the keychain 1 from the sidetable 1.",
            ),
            Turn(
                "Now I go back to the sofa 1.",
                "go to sofa 1",
                "You arrive at sofa 1. On the sofa 1, you see a box 2, a creditcard 2, a "
                "creditcard 1, a keychain 2, and a pillow 1.",
            ),
            Turn(
                "I move the keychain 1 to the sofa 1. Then both keychains are in the sofa 1.",
                "move keychain 1 to sofa 1",
                "You move the keychain 1 to the sofa 1.",
            ),
        ),
    ),
}


def render_example(example: Example) -> str:
    """The example as a transcript in the same THOUGHT/ACTION format the model must use."""
    lines = [f"Observation: {example.observation}"]
    for turn in example.turns:
        lines.append(f"THOUGHT: {turn.thought}")
        lines.append(f"ACTION: {turn.action}")
        lines.append(f"Observation: {turn.observation}")
    return "\n".join(lines)
