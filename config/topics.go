package config

import (
	"cmp"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// topicConfigs reads topics.configs.
func (r *reader) topicConfigs(v *value) {
	r.c.Topics.Configs = r.stringMap(v, "a mapping of topic config names to values")
}

var topicSpecKeys = []string{"name", "partitions", "configs"}

// topicCreates reads topics.create: a list of {name, partitions, configs}.
func (r *reader) topicCreates(v *value) {
	if v.null() {
		return
	}
	if v.kind != yaml.SequenceNode {
		r.errorf(v.path, "expected a list of topics such as [{name: input, partitions: 3}], found %s", v.describe())
		return
	}
	for i, item := range v.items {
		t := TopicSpec{Path: fmt.Sprintf("%s[%d]", v.path, i)}
		if item.kind != yaml.MappingNode {
			r.errorf(t.Path, "expected a mapping such as {name: input, partitions: 3}, found %s", item.describe())
			continue
		}
		r.mapping(item, "", topicSpecKeys)
		for _, f := range item.pairs {
			switch f.key {
			case "name":
				t.Name = r.str(f.val)
			case "partitions":
				t.Partitions = r.int32(f.val)
			case "configs":
				t.Configs = r.stringMap(f.val, "a mapping of topic config names to values")
			}
		}
		r.c.Topics.Create = append(r.c.Topics.Create, t)
	}
}

// topics checks the topics section: the defaults for the topics the
// pipeline creates, and topics.create.
func (k *checker) topics() {
	t := k.c.Topics
	if t.Partitions < 0 {
		k.errorf("topics.partitions", "must not be negative (0 means as many as the largest source topic), found %d", t.Partitions)
	}
	if t.ReplicationFactor != -1 && t.ReplicationFactor < 1 {
		k.errorf("topics.replication_factor", "must be -1 (the broker's default) or at least 1, found %d", t.ReplicationFactor)
	}
	for _, name := range sortedKeys(t.Configs) {
		if name == "" {
			k.errorf("topics.configs", "a topic config name is empty")
		}
	}
	seen := make(map[string]string)
	for _, c := range t.Create {
		switch {
		case c.Name == "":
			k.errorf(c.Path+".name", "required: the topic to create")
		case k.topic(c.Path+".name", c.Name):
			if first, dup := seen[c.Name]; dup {
				k.errorf(c.Path+".name", "topic %q is already in %s", c.Name, first)
			}
			seen[c.Name] = cmp.Or(seen[c.Name], c.Path)
		}
		if c.Partitions < 0 {
			k.errorf(c.Path+".partitions", "must not be negative (0 means topics.partitions, or 1), found %d", c.Partitions)
		}
		for _, name := range sortedKeys(c.Configs) {
			if name == "" {
				k.errorf(c.Path+".configs", "a topic config name is empty")
			}
		}
	}
}
