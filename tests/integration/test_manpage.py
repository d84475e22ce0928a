"""packaging/sluice.1 against the real command line: every command, option, exit code and
environment variable that `sluice --help` (and each command's --help) lists is documented in the
man page, and the page formats without a warning from man."""
import os
import re
import shutil
import subprocess
import unittest

import harness

MAN_PAGE = os.path.join(harness.SOURCE_DIR, "packaging", "sluice.1")


def help_text(*command):
    result = harness.run(*command, "--help")
    assert result.returncode == 0, result.stderr
    return result.stdout


def section(text, title):
    """The lines of a --help section (`Options:`, `Subcommands:`) up to the next blank line."""
    lines = text.splitlines()
    start = lines.index(title) + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].strip()), len(lines))
    return lines[start:end]


def options_of(text):
    """Every -x and --long option named at the start of an `Options:` entry."""
    names = set()
    for line in section(text, "Options:"):
        match = re.match(r"\s+(-\S+)", line)
        if match:
            names.update(re.findall(r"--?[A-Za-z][\w-]*", match.group(1)))
    return names


def man_page_text():
    """The page's words as a reader sees them: roff escapes for - and fonts undone."""
    with open(MAN_PAGE) as f:
        text = f.read()
    text = re.sub(r"\\f[BIRP]", "", text)
    return text.replace("\\-", "-").replace("\\e", "\\")


def man_section(text, name):
    """The text of one .SH section of the page."""
    match = re.search(r"^\.SH " + re.escape(name) + r"\n(.*?)(?=^\.SH |\Z)", text, re.M | re.S)
    assert match, f"no .SH {name} in {MAN_PAGE}"
    return match.group(1)


class ManPageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.top_help = help_text()
        cls.page = man_page_text()

    def commands(self):
        return [line.split()[0] for line in section(self.top_help, "Subcommands:")]

    def assertDocumented(self, word, where, what):
        self.assertRegex(where, r"(?<![\w-])" + re.escape(word) + r"(?![\w-])",
                         f"{what} {word} is in --help but not in {MAN_PAGE}")

    def test_help_lists_the_commands_this_test_knows(self):
        # If this fails, --help changed shape: make sure the other tests still read it.
        self.assertEqual(self.commands(), ["serve", "check-config"])
        self.assertIn("--log-level", options_of(self.top_help))

    def test_every_command_is_documented(self):
        commands = man_section(self.page, "COMMANDS")
        for command in self.commands():
            self.assertDocumented(command, commands, "command")
            self.assertDocumented(command, man_section(self.page, "SYNOPSIS"), "command")

    def test_every_option_is_documented(self):
        options = man_section(self.page, "OPTIONS")
        names = options_of(self.top_help)
        for command in self.commands():
            names |= options_of(help_text(command))
        self.assertIn("--config", names)
        for name in sorted(names):
            self.assertDocumented(name, options, "option")

    def test_every_exit_code_is_documented(self):
        exit_status = man_section(self.page, "EXIT STATUS")
        codes = re.findall(r"^  (\d+) ", self.top_help.split("Exit codes:")[1], re.M)
        self.assertEqual(codes, ["0", "1", "64", "78"])
        for code in codes:
            self.assertRegex(exit_status, r"(?m)^\.TP\n\.B " + code + r"$",
                             f"exit code {code} is in --help but not in {MAN_PAGE}")

    def test_every_environment_variable_is_documented(self):
        environment = man_section(self.page, "ENVIRONMENT")
        variables = set(re.findall(r"\bSLUICE_[A-Z_]+\b", self.top_help))
        self.assertGreaterEqual(len(variables), 5)
        for variable in sorted(variables):
            self.assertRegex(environment, r"(?m)^\.TP\n\.B " + variable + r"$",
                             f"{variable} is in --help but not in {MAN_PAGE}")

    def test_man_formats_the_page_without_warnings(self):
        if shutil.which("man") is None:
            self.fail("man not found (Debian's man-db provides it)")
        result = subprocess.run(["man", "--warnings", "-l", "-Tutf8", "-Z", MAN_PAGE],
                                capture_output=True, text=True, timeout=60,
                                env=dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stderr.strip(), "")


if __name__ == "__main__":
    unittest.main()
