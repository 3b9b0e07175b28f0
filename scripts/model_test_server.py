"""Starts llama-cpp-python's OpenAI-compatible server with a Gemma 3 chat format that shows
tool calls and tool results to the model (run by scripts/model-test-server.sh inside its own
environment; the arguments are the server's).

The packaged GGUF carries no chat template, so the server would fall back to Llama 2's format,
in which Gemma answers nothing; its own "gemma" format drops tool messages, so the model would
never see a tool's result. This one is Gemma 3's turn format (system text as a user turn),
with an assistant's tool calls written as "[called NAME with ARGUMENTS]" and a tool's result as
a user turn. Not the <tool_call> form the loop's parser reads: the packaged model is the
pretrained one (not instruction-tuned) and continues the patterns it sees, so a prompt holding
that form would have it write calls of its own. A request whose tool_choice names a function
still goes through llama-cpp-python's grammar for that function's arguments (design 0066).
"""

from llama_cpp import llama_chat_format
from llama_cpp.server.__main__ import main

NAME = "polyloop-gemma3"
TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message.role == 'assistant' %}"
    "<start_of_turn>model\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}"
    "[called {{ call.function.name }} with {{ call.function.arguments }}]"
    "{% endfor %}"
    "<end_of_turn>\n"
    "{% elif message.role == 'tool' %}"
    "<start_of_turn>user\nThe tool returned:\n{{ message.content }}<end_of_turn>\n"
    "{% else %}"
    "<start_of_turn>user\n{{ message.content }}<end_of_turn>\n"
    "{% endif %}"
    "{% endfor %}"
    "<start_of_turn>model\n"
)
#: <eos> and <end_of_turn>: the GGUF names only the first as an end of generation.
STOP_TOKEN_IDS = [1, 106]

if __name__ == "__main__":
    formatter = llama_chat_format.Jinja2ChatFormatter(
        TEMPLATE, eos_token="<eos>", bos_token="<bos>", stop_token_ids=STOP_TOKEN_IDS
    )
    llama_chat_format.LlamaChatCompletionHandlerRegistry().register_chat_completion_handler(
        NAME, formatter.to_chat_handler()
    )
    main()
