/* What a hostile (or just odd) program shows a tracer: strings that are terminal escapes and Textual
 * markup, and functions whose symbol names are (the test renames them with objcopy --redefine-sym).
 * The test writes this file with each @NAME@ replaced by the character, so the repository's copy is
 * safe to cat: @ESC@]0;title@BEL@@ESC@[2J [/]close [@click=app.quit]
 * A form feed@FF@ and a U+2028@LS@ here: perf and the line table count newlines only.
 * probed line marker: HOSTILE LINE */
#include <stdio.h>

__attribute__((noinline)) int shout(const char *s, int n)
{
    asm volatile("" ::: "memory");
    return s[0] + n; /* HOSTILE LINE */
}

__attribute__((noinline)) int renamed_escape(int n) { return n + 1; }
__attribute__((noinline)) int renamed_close(int n) { return n + 2; }
__attribute__((noinline)) int renamed_click(int n) { return n + 3; }

int main(void)
{
    static const char *said[] = {
        "\033]0;title\007\033[2J",
        "[/]close [link=https://example.com]x[/link] [@click=app.quit]q",
        "\342\200\256olleh",  /* U+202E RIGHT-TO-LEFT OVERRIDE */
    };
    int sum = 0;
    for (int i = 0; i < 3; i++)
        sum += shout(said[i], i);
    sum += renamed_escape(1) + renamed_close(2) + renamed_click(3);
    printf("%d\n", sum);
    return 0;
}
