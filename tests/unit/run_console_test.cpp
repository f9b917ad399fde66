// The terminal side of a foreground run: which ranks' output it shows (--output), how a worker's
// line is made safe for the terminal, and that the live status line never interleaves with it.

#include <doctest/doctest.h>

#include <cstdio>
#include <string>

#include "launcher/run/console.h"

using dtrain::run::Console;
using dtrain::run::ConsoleStatus;
using dtrain::run::OutputChoice;
using dtrain::run::WorkerEcho;

namespace {

/// A FILE* whose bytes the test reads back (open_memstream).
struct Captured {
  char* data = nullptr;
  size_t size = 0;
  std::FILE* file = open_memstream(&data, &size);
  ~Captured() {
    if (file) std::fclose(file);
    std::free(data);
  }
  std::string text() {
    std::fflush(file);
    return std::string(data, size);
  }
};

}  // namespace

TEST_CASE("--output words: auto, all, rank0 (or 0), none, and nothing else") {
  CHECK(dtrain::run::parse_output_choice("auto") == OutputChoice::automatic);
  CHECK(dtrain::run::parse_output_choice("all") == OutputChoice::all);
  CHECK(dtrain::run::parse_output_choice("rank0") == OutputChoice::rank0);
  CHECK(dtrain::run::parse_output_choice("0") == OutputChoice::rank0);
  CHECK(dtrain::run::parse_output_choice("none") == OutputChoice::none);
  CHECK_FALSE(dtrain::run::parse_output_choice("ALL"));
  CHECK_FALSE(dtrain::run::parse_output_choice(""));
  CHECK_FALSE(dtrain::run::parse_output_choice("rank1"));
  for (OutputChoice choice : {OutputChoice::automatic, OutputChoice::all, OutputChoice::rank0, OutputChoice::none}) {
    CHECK(dtrain::run::parse_output_choice(dtrain::run::to_string(choice)) == choice);
  }
}

TEST_CASE("auto shows every rank up to 8 ranks and rank 0 beyond, and says so") {
  WorkerEcho small{OutputChoice::automatic, 8};
  for (int rank = 0; rank < 8; ++rank) CHECK(small.shows(rank));
  CHECK(small.shows_every_rank());
  CHECK(small.describe() == "all 8 ranks");

  WorkerEcho large{OutputChoice::automatic, 9};
  CHECK(large.shows(0));
  CHECK_FALSE(large.shows(1));
  CHECK_FALSE(large.shows(8));
  CHECK_FALSE(large.shows_every_rank());
  CHECK(large.describe() == "rank 0 of 9 ranks (more than 8 ranks; --output all for every rank)");

  WorkerEcho all{OutputChoice::all, 64};
  CHECK(all.shows(63));
  CHECK(all.describe() == "all 64 ranks");
  WorkerEcho rank0{OutputChoice::rank0, 2};
  CHECK(rank0.shows(0));
  CHECK_FALSE(rank0.shows(1));
  CHECK(rank0.describe() == "rank 0 of 2 ranks (--output all for every rank)");
  WorkerEcho none{OutputChoice::none, 2};
  CHECK_FALSE(none.shows(0));
  CHECK(WorkerEcho{OutputChoice::automatic, 1}.describe() == "rank 0");
}

TEST_CASE("a worker's line keeps its text, tabs and colours, and other control bytes are escaped") {
  using dtrain::run::terminal_line;
  CHECK(terminal_line("loss 0.25") == "loss 0.25");
  CHECK(terminal_line("a\tb") == "a\tb");
  CHECK(terminal_line("\033[32mok\033[0m") == "\033[32mok\033[0m");
  CHECK(terminal_line("\033[1;31mFAIL") == "\033[1;31mFAIL");
  // Cursor moves, screen clears, window titles: escaped, shown as text.
  CHECK(terminal_line("\033[2J") == "\\x1b[2J");
  CHECK(terminal_line("\033]0;pwned\007") == "\\x1b]0;pwned\\x07");
  CHECK(terminal_line("\033[1A up") == "\\x1b[1A up");
  CHECK(terminal_line("bell\007") == "bell\\x07");
  CHECK(terminal_line("\xc2\x9b" "2J") == "\\xc2\\x9b2J");
  // A progress bar redrawn with carriage returns shows its newest state; CRLF ends a line.
  CHECK(terminal_line(" 10%|#    |\r 50%|###  |\r100%|#####|") == "100%|#####|");
  CHECK(terminal_line("windows line\r") == "windows line");
  CHECK(terminal_line("") == "");
  CHECK(terminal_line("\033[") == "\\x1b[");
}

TEST_CASE("chosen ranks' lines go to the stream they came from, prefixed, and colours are reset") {
  Captured status, out, err;
  Console console(Console::Mode::plain, status.file, WorkerEcho{OutputChoice::rank0, 2, out.file, err.file});
  console.worker_line(0, "stdout", "step 1 loss 0.5");
  console.worker_line(0, "stderr", "warning: slow");
  console.worker_line(1, "stdout", "not shown");
  console.worker_line(0, "stdout", "\033[31mred");
  CHECK(out.text() == "[rank 0] step 1 loss 0.5\n[rank 0] \033[31mred\033[0m\n");
  CHECK(err.text() == "[rank 0] warning: slow\n");
  CHECK(status.text().empty());
}

TEST_CASE("on a terminal the live status line is cleared before a worker's line and redrawn after") {
  Captured terminal;
  Console console(Console::Mode::terminal, terminal.file, WorkerEcho{OutputChoice::all, 2, terminal.file, terminal.file});
  ConsoleStatus running{"running", 0, 2, 2, 5, 0, false};
  console.status(1000, 1000, running);
  console.worker_line(1, "stdout", "hello");
  console.status(1001, 1001, running);  // the same text, 1 ms later: redrawn, as the line was cleared
  std::string text = terminal.text();
  CHECK(text == "\r\033[Krunning · gen 0 · 2/2 workers · step 5\r\033[K[rank 1] hello\n"
                "\r\033[Krunning · gen 0 · 2/2 workers · step 5");
}

TEST_CASE("a quiet (detached) console shows no worker output whatever the choice") {
  Captured out;
  Console console(Console::Mode::quiet, out.file, WorkerEcho{OutputChoice::all, 2, out.file, out.file});
  console.worker_line(0, "stdout", "hello");
  CHECK(out.text().empty());
}
