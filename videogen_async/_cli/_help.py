"""The help texts of ``videogen``: each command's epilog, with its examples."""

from __future__ import annotations

from ._common import EXIT_CODES_HELP

#: The epilog of each command's help (``main`` for ``videogen --help``).
EPILOGS = {
    "main": f"""\
configuration:
  The API key and the service's base URL come from --api-key / --base-url, else from the
  environment variables VIDEOGEN_API_KEY and VIDEOGEN_BASE_URL. Prefer the environment for
  the key: a command line is visible to other users of the machine. The key is never printed.
  The options go before or after the command (--timeout of the requests: before it).

examples:
  videogen demo                               # the whole service, offline, in seconds
  videogen sandbox --port 8765                # a local service to try the commands on
  export VIDEOGEN_BASE_URL=http://127.0.0.1:8765 VIDEOGEN_API_KEY=sandbox-key
  videogen credits
  videogen create "a red fox in the snow" --duration 6 --wait
  videogen batch prompts.jsonl --download videos/
  videogen --json status t_123 t_456

{EXIT_CODES_HELP}

Run "videogen COMMAND --help" for the options of a command. More: docs/cli.md.""",
    "credits": "examples:\n  videogen credits\n  videogen --json credits",
    "status": "examples:\n  videogen status t_123\n  videogen --json status t_123 t_456",
    "ledger": """\
examples:
  videogen ledger summary prompts.journal.sqlite
  videogen ledger list prompts.journal.sqlite --state unknown
  videogen --json ledger list postgresql://u:p@db:5432/videos --state pending
  videogen ledger summary videos.db --group-by tenant
  APP_HOOK_SECRET=whsec_... videogen ledger dispatch videos.db \\
      --webhook https://app.example/hooks/video --secret-env APP_HOOK_SECRET
list and summary only read the ledger: no API key needed, nothing sent or written.""",
    "ledger list": """\
One row per entry: its key, state, task (or project) id, credits, when it last changed, and
its video or error. Only reads the ledger: no API key needed, nothing sent or written.

examples:
  videogen ledger list prompts.journal.sqlite
  videogen ledger list prompts.journal.sqlite --state unknown --state refused
  videogen ledger list videos.db --kind videos --limit 20
  videogen --json ledger list postgresql://u:p@db:5432/videos --state pending""",
    "ledger summary": """\
The entries per state, the credits spent and those reserved by creates in flight, and the
deliveries of each webhook destination. Only reads the ledger.

examples:
  videogen ledger summary prompts.journal.sqlite
  videogen ledger summary videos.db --group-by tenant     # per value of metadata["tenant"]
  videogen --json ledger summary postgresql://u:p@db:5432/videos""",
    "ledger dispatch": """\
Delivers each entry that reaches a terminal state to a webhook, signed as Standard Webhooks
sign (webhook-id, webhook-timestamp, webhook-signature), until Ctrl-C. The secret is read from
an environment variable, never from the command line (which other users can see).

examples:
  APP_HOOK_SECRET=whsec_... videogen ledger dispatch videos.db \\
      --webhook https://app.example/hooks/video --secret-env APP_HOOK_SECRET
  videogen ledger dispatch videos.db --webhook https://app.example/hooks/video \\
      --secret-env APP_HOOK_SECRET --backlog --stop-when-idle    # catch up, then stop""",
    "create": """\
examples:
  videogen create "a paper boat on a rainy street"
  videogen create "a hummingbird at a flower" --model videomodel_2_0_fast --ratio 9:16 \\
      --duration 8 --wait --timeout 600
  videogen create "make this photo move" --function-mode first_last_frames \\
      --image-url https://cdn.example.com/first.png --image-url https://cdn.example.com/last.png
  videogen create "a koi pond at night" --download videos/     # create, wait, save
  echo "a long prompt from a file or another program" | videogen create -

Every rule of the service is checked before anything is sent, so a refused request costs no
credits. Without --wait the task id is printed at once; follow it with "videogen wait ID".""",
    "batch": """\
input (JSON lines): one direct-task request per line, with the fields of "create":
  {"prompt": "a red fox in the snow", "duration": 6}
  {"prompt": "a lighthouse in a storm", "model": "videomodel_2_0_fast", "ratio": "9:16"}
  # blank lines and lines starting with # are ignored
A bad line is reported with its number and skipped; it costs nothing.

the journal (resuming):
  Each line is recorded in a ledger (--journal: a file, by default NAME.journal.sqlite beside
  the input, or a PostgreSQL URL): before its create is sent, the task id the moment it comes
  back, then the final status. Run the same command again after a crash or Ctrl-C and it
  resumes: lines already created are waited for, never created again. A line whose create may
  or may not have reached the service (a crash at that instant, a dropped connection, a
  timeout) is reported as "unknown" and is not sent again unless you pass --retry-unknown,
  because sending it again could pay for the same video twice.

the manifest (NAME.results.jsonl unless --manifest): one JSON object per input line, in
input order: line, input, task_id, status, video_url, error, credits, path.
  status: succeeded | failed | error | invalid | unknown | refused | pending | not_created

examples:
  videogen batch prompts.jsonl
  videogen batch prompts.jsonl --download videos/ --max-concurrency 8 --timeout 1800
  videogen batch prompts.jsonl --journal runs/monday.sqlite --manifest runs/monday.jsonl
  videogen batch prompts.jsonl --retry-unknown      # accept possible duplicates
  videogen batch examples/prompts.csv               # CSV: a header row names the fields

Ctrl-C stops cleanly (creates in flight are finished and recorded, the manifest is written)
and prints the command that resumes. Exit code 0 only when every line succeeded.""",
    "project": """\
A project turns a reference ad video and product images into a script, then into videos.
In auto mode the first batch of videos is made as soon as the script is ready; in manual
mode you review the script and make batches with "videogen project videos".

examples:
  videogen project create https://cdn.example.com/ad.mp4 \\
      --product-image-url https://cdn.example.com/bottle.png --mode manual
  videogen project script p_123                  # waits for the script, prints it
  videogen project videos p_123 --out-number 2 --wait
  videogen project videos p_123 --script-file my-script.txt --aspect-ratio 1:1
  videogen project wait p_123 --download videos/
  videogen project download p_123 videos/
  videogen project get p_123 --script""",
    "demo": """\
The demo starts the sandbox inside this process (nothing leaves the machine, no key is
needed) with its clock sped up, and goes through the service as you would: the balance, a
batch of direct tasks with a progress bar, a manual project with its script and two video
batches, the downloads, and the final balance and billing.

examples:
  videogen demo
  videogen demo --to ./demo-videos --tasks 12
  videogen --json demo > demo.json""",
    "download": """\
Each video is streamed into a temporary file beside its destination and renamed only when it
is complete and of the size the host declared, so DIR never holds a partial video. A broken
connection is resumed with a Range request. The API key is never sent to the video's host.

examples:
  videogen download t_123 t_456 --to videos/
  videogen download https://cdn.example.com/v/abc.mp4 --to videos/""",
    "wait": """\
examples:
  videogen wait t_123
  videogen wait t_123 t_456 t_789 --timeout 900
  videogen --json wait t_123 | jq -r .[0].result.video_url

Exit code 0 when every task succeeded, 1 when one failed or was still running at --timeout,
3 when one could not be read (e.g. an unknown id).""",
    "completion": """\
The script runs videogen at each TAB, which answers from its own commands and options.

examples:
  videogen completion bash > ~/.local/share/bash-completion/completions/videogen
  videogen completion zsh > "${fpath[1]}/_videogen"
  videogen completion fish > ~/.config/fish/completions/videogen.fish
  eval "$(videogen completion bash)"            # this shell only""",
    "sandbox": """\
The sandbox is the whole service in memory (tasks, projects, credits, errors), for trying the
commands and for tests. It prints the two environment variables that point videogen at it.

examples:
  videogen sandbox
  videogen sandbox --port 0 --time-scale 0.01 --seed 1     # 100x faster, reproducible
  videogen sandbox --failure-rate 0.1 --credits 500""",
}

#: The SDK's calls (``client.tasks.create``) and the command that does each.
SDK_CALLS = {
    "tasks": "create",
    "tasks.get": "status",
    "tasks.wait": "wait",
    "tasks.watch": "wait",
    "tasks.gather_until_done": "wait",
    "projects": "project",
    "credits.get": "credits",
    "projects.wait_for_script": "project script",
    "projects.create_videos": "project videos",
    **{f"projects.{c}": f"project {c}" for c in ("create", "get", "wait")},
}


def command_for(argv: list[str]) -> str | None:
    """The command that does what ``argv`` asks in the SDK's words (``tasks create``)."""
    valued = ("--api-key", "--base-url", "--timeout", "--max-retries")  # options with a value
    words = [
        w
        for b, w in zip(["", *argv][: len(argv)], argv, strict=True)
        if w[:1] != "-" and b not in valued
    ]
    named = ".".join(words[:3]).replace("-", "_").removeprefix("client.").split(".")
    command = SDK_CALLS.get(".".join(named[:2]), SDK_CALLS.get(named[0]))  # not "credits" alone
    return None if command is None else f"videogen {command}"
