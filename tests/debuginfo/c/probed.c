/* A small program for comparing `kprobe-tui lines/vars` with `perf probe -L/-V`. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shapes.h"

int global_counter;
static unsigned long static_total = 7;
const char *global_label = "shapes";

typedef unsigned long weight_t;

static int __attribute__((noinline)) count_ready(struct shape *list, int limit)
{
	int ready = 0;
	struct shape *s;

	for (s = list; s && limit > 0; s = s->next, limit--) {
		int level = s->flags.level;

		if (s->flags.ready)
			ready += clamp(level, 0, 5);
		global_counter++;
	}
	return ready;
}

weight_t __attribute__((noinline)) total_area(struct shape *list, weight_t scale)
{
	weight_t sum = 0;
	static int calls;

	calls++;
	while (list) {
		long area = shape_area(list);

		list->box.area = (unsigned long)clamp((int)area, 0, 1 << 20);
		sum += list->box.area * scale;
		list = list->next;
	}
	static_total += sum;
	return sum;
}

int __attribute__((noinline))
describe(const struct shape *s, char *buf, size_t size)
{
	int written;
	int (*printer)(char *, size_t, const char *, ...) = snprintf;

	written = printer(buf, size, "%s at (%d,%d) level %u delta %d",
			  s->name, s->origin.x, s->origin.y, s->flags.level, s->flags.delta);
	if (written < 0)
		return -1;
	return clamp(written, 0, (int)size - 1);
}

long __attribute__((noinline)) largest_area(const struct shape *a, const struct shape *b)
{
	long first = shape_area(a);
	long second = shape_area(b);

	return first > second ? first : second;
}

int __attribute__((noinline)) remember(void *cookie, const void *key, void **slot)
{
	*slot = cookie;
	return key != NULL;
}

int main(int argc, char **argv)
{
	struct shape shapes[3];
	char text[128];
	int i;

	memset(shapes, 0, sizeof(shapes));
	for (i = 0; i < 3; i++) {
		shapes[i].name = argc > i ? argv[i] : global_label;
		shapes[i].origin.x = i;
		shapes[i].origin.y = -i;
		shapes[i].box.corner.x = 10 + i * argc;
		shapes[i].box.corner.y = 20 - i;
		shapes[i].flags.ready = i & 1;
		shapes[i].flags.level = i;
		shapes[i].flags.delta = -i;
		shapes[i].next = i < 2 ? &shapes[i + 1] : NULL;
	}
	printf("%d ready\n", count_ready(shapes, 3));
	printf("%lu area\n", total_area(shapes, (weight_t)argc));
	describe(&shapes[0], text, sizeof(text));
	printf("%ld largest\n", largest_area(&shapes[0], &shapes[2]));
	puts(text);
	remember(text, global_label, (void **)&shapes[1].name);
	return clamp(global_counter, 0, 1);
}
