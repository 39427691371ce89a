/**
 * The settings schema and the code agree: what the schema declares (toolbar
 * commands, translation domain, defaults) is what the plugin registers and reads.
 */
import schema from '../../schema/plugin.json';
import { CommandIDs, DEFAULT_SETTINGS, TRANSLATION_DOMAIN } from '../tokens';

describe('schema/plugin.json', () => {
  it('declares toolbar items for commands the plugin registers', () => {
    const commands = new Set<string>(Object.values(CommandIDs));
    const items = schema['jupyter.lab.toolbars'].Notebook;
    expect(items.length).toBeGreaterThan(0);
    for (const item of items) {
      expect(commands).toContain(item.command);
    }
  });

  it('translates its labels in the plugin own domain', () => {
    // jupyterlab_server translates toolbar labels, titles and descriptions of
    // a schema in this domain (the default would be "jupyterlab").
    expect(schema['jupyter.lab.internationalization'].domain).toBe(
      TRANSLATION_DOMAIN
    );
  });

  it('has the same defaults as the code falls back to', () => {
    const properties = schema.properties as Record<
      string,
      { default: unknown }
    >;
    expect(Object.keys(properties).sort()).toEqual(
      Object.keys(DEFAULT_SETTINGS).sort()
    );
    for (const [key, value] of Object.entries(DEFAULT_SETTINGS)) {
      expect(properties[key].default).toEqual(value);
    }
  });
});
