"""Writes suite.jsonl: the search domain's bundled trajectories (run from this folder)."""

import json

PY = "https://docs.python.org/3.11/"
FOLDOC = "https://foldoc.org/"


def search(*queries):
    if len(queries) == 1:
        return {"type": "tool", "tool": "web_search", "args": {"query": queries[0]}}
    return {"type": "tool", "tool": "web_search", "args": {"queries": list(queries)}}


def extract(url):
    return {"type": "tool", "tool": "web_extractor", "args": {"url": url}}


def memory(action, key=None, value=None):
    args = {"action": action}
    if key is not None:
        args["key"] = key
    if value is not None:
        args["value"] = value
    return {"type": "tool", "tool": "dict_memory", "args": args}


TRAJECTORIES = {
    "json-module": [search("python json module dump load"), extract(PY + "library/json.html"), memory("add", "json", "json.dumps(obj, indent=2) pretty-prints")],
    "pathlib-vs-os": [search("pathlib Path glob"), search("os.path join"), extract(PY + "library/pathlib.html"), memory("add", "glob", "Path.glob yields matching paths"), memory("retrieve", "glob")],
    "asyncio-gather": [search("asyncio gather tasks"), search("asyncio gather return_exceptions"), extract(PY + "library/asyncio-task.html"), memory("add", "gather", "return_exceptions=True collects errors")],
    "lambda-calculus": [search("lambda calculus"), extract(FOLDOC + "lambda-calculus"), search("beta reduction"), memory("add", "lambda", "a formal system of functions")],
    "refine-regex": [search("regular expression"), search("python re module named groups"), search("re.sub backreference"), extract(PY + "library/re.html")],
    "multi-query": [search("dataclasses field default_factory", "typing Protocol"), extract(PY + "library/dataclasses.html"), extract(PY + "library/typing.html")],
    "unknown-url": [search("sqlite3 row factory"), extract("https://docs.python.org/3.11/library/nosuchmodule.html"), extract(PY + "library/sqlite3.html")],
    "memory-lifecycle": [memory("add", "topic", "garbage collection"), memory("update", "topic", "reference counting"), memory("retrieve", "topic"), memory("retrieve_all"), memory("remove", "topic"), memory("retrieve", "topic")],
    "memory-errors": [memory("retrieve", "missing"), memory("update", "missing", "x"), memory("add", "a", "1"), memory("add", "a", "2"), memory("remove_all"), memory("retrieve_all")],
    "garbage-collection": [search("garbage collection"), extract(FOLDOC + "garbage%20collection"), search("python gc module collect"), extract(PY + "library/gc.html"), memory("add", "gc", "gc.collect() runs a full collection")],
    "subprocess-run": [search("subprocess run capture_output"), extract(PY + "library/subprocess.html"), search("subprocess timeout expired exception")],
    "unicode": [search("unicode"), search("utf-8 encoding"), extract(FOLDOC + "UTF-8"), search("python unicode howto"), extract(PY + "howto/unicode.html")],
    "tcp-ip": [search("TCP/IP"), extract(FOLDOC + "TCP%2FIP"), search("python socket create_connection"), extract(PY + "library/socket.html")],
    "decorators": [search("decorator functools wraps"), extract(PY + "library/functools.html"), memory("add", "wraps", "copies __name__ and __doc__"), search("lru_cache maxsize")],
    "itertools-recipes": [search("itertools groupby"), search("itertools recipes pairwise"), extract(PY + "library/itertools.html")],
    "bad-arguments": [{"type": "tool", "tool": "web_search", "args": {}}, {"type": "tool", "tool": "web_extractor", "args": {"link": PY}}, search("argparse subcommands")],
    "unknown-tool": [{"type": "tool", "tool": "web_browse", "args": {"url": PY}}, search("argparse add_argument choices"), extract(PY + "library/argparse.html")],
    "closure": [search("closure"), extract(FOLDOC + "closure"), search("python nonlocal statement")],
    "compiler-terms": [search("compiler"), search("lexical analysis tokenizer"), extract(FOLDOC + "compiler"), search("python tokenize module"), memory("add", "lexer", "splits source into tokens")],
    "datetime": [search("datetime timezone utc"), extract(PY + "library/datetime.html"), search("strftime format codes"), memory("add", "iso", "datetime.fromisoformat")],
    "logging-config": [search("logging basicConfig level"), search("logging handlers rotating file"), extract(PY + "library/logging.handlers.html"), memory("add", "rotate", "RotatingFileHandler maxBytes backupCount")],
    "no-results": [search("zzqxv flurbonium"), search("unittest mock patch"), extract(PY + "library/unittest.mock.html")],
    "hash-table": [search("hash table"), extract(FOLDOC + "hash%20function"), search("python dict implementation hash"), memory("add", "hash", "average O(1) lookup")],
    "contextlib": [search("contextlib contextmanager"), extract(PY + "library/contextlib.html"), search("ExitStack callback")],
    "tutorial-classes": [search("python tutorial classes inheritance"), extract(PY + "tutorial/classes.html"), search("private variables name mangling")],
    "research-notes": [search("recursion"), memory("add", "recursion", "see recursion"), search("tail recursion"), memory("update", "recursion", "a function calling itself"), memory("retrieve_all"), extract(FOLDOC + "recursion")],
    "collections": [search("collections namedtuple"), search("collections Counter most_common"), extract(PY + "library/collections.html"), memory("add", "counter", "Counter.most_common(n)"), memory("retrieve", "counter")],
    "threading-vs-multiprocessing": [search("threading GIL"), search("multiprocessing Pool map"), extract(PY + "library/multiprocessing.html"), search("concurrent futures ThreadPoolExecutor"), extract(PY + "library/concurrent.futures.html")],
    "operating-system": [search("operating system"), extract(FOLDOC + "operating%20system"), search("kernel"), search("python os environ")],
    "typing-generics": [search("typing TypeVar generic"), search("typing Literal"), search("typing overload"), extract(PY + "library/typing.html"), memory("add", "literal", "Literal restricts values")],
    "csv-module": [search("csv DictReader"), extract(PY + "library/csv.html"), search("csv dialect quoting")],
    "whats-new": [search("what's new in python 3.11"), extract(PY + "whatsnew/3.11.html"), search("exception groups except star"), memory("add", "3.11", "ExceptionGroup and except*")],
    "long-session": [search("http server"), search("http.server SimpleHTTPRequestHandler"), extract(PY + "library/http.server.html"), memory("add", "serve", "python -m http.server"), search("urllib request urlopen"), extract(PY + "library/urllib.request.html"), memory("add", "fetch", "urllib.request.urlopen"), memory("retrieve_all"), search("http status codes"), extract(PY + "library/http.html")],
}


def main():
    with open("suite.jsonl", "w") as out:
        for name, steps in TRAJECTORIES.items():
            assert 3 <= len(steps) <= 12, name
            record = {"id": f"search-{name}", "domain": "search", "env": {"backend": "search"}, "steps": [{"action": a} for a in steps]}
            out.write(json.dumps(record) + "\n")


main()
