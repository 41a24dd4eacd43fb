from gymhub.envs import Final, Task, ToolEnv, register, tool
from gymhub.types import Message, Score, ToolCall


class Guess(ToolEnv):
    def __init__(self, max_turns: int = 5):
        tasks = [Task(id=f"n{i}", prompt="Guess my number (0-9).", gold=i) for i in range(10)]
        super().__init__(tasks, max_turns=max_turns)

    def _start(self, task):
        return [Message(role="user", content=task.prompt)], {}

    @tool
    def guess(self, n: int) -> Final | str:
        """Guess the number.

        Args:
            n: your guess, 0-9.
        """
        if n == self.task.gold:
            return Final("Right!", Score(1.0))
        return "higher" if n < self.task.gold else "lower"

    def gold_action(self):
        call = ToolCall("g", "guess", {"n": self.task.gold})
        return Message(role="assistant", content="", tool_calls=(call,))


register("guess-v0", Guess)
