"""The reproduction application: the papers' claims, where each row's settings come from, and the work
the table tools keep between sittings. It imports the library; the library never imports it.

- `claims`: each paper's claims as data and the paired-interval verdict that judges them.
- `provenance`: where each row's settings come from, written under each table.
- `pieces`: STS test sets scored in kept pieces, so a row longer than a sitting resumes.

The tools that build the tables (tools/reproduce*.py, claims_table.py, family_claims.py) import it from
the checkout's root.
"""


def run_tool(main, name: str) -> None:
    """A table tool's entry point: exit with `main()`'s status; an error in the user's input (a
    MinidecoderError, named with its fix) is one line and status 2, as minidecoder's CLI prints it, not a
    traceback."""
    import sys

    from minidecoder.errors import MinidecoderError

    try:
        status = main()
    except MinidecoderError as error:
        print(f"{name}: error: {error}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(status)
