// One style for every file: neostandard (fastify's), with its TypeScript rules.
// `npm run lint` checks; `npm run lint -- --fix` rewrites what it can.
import neostandard from 'neostandard'

export default [
  ...neostandard({
    ts: true,
    ignores: ['bench-out/**', 'data/**', 'models/**', '.tap/**', 'coverage/**'],
  }),
  {
    rules: {
      // `void promise` marks a promise that is let go on purpose.
      'no-void': ['error', { allowAsStatement: true }],
      // TypeBox's idiom: a schema and its static type share a name (`const X = Type.Object(...)`,
      // `type X = Static<typeof X>`); TypeScript itself reports real redeclarations.
      '@typescript-eslint/no-redeclare': 'off',
      // models.json's `${VAR}` references appear in strings, tests and messages on purpose.
      'no-template-curly-in-string': 'off',
      // Names after a format (quantizeQ4_0) and JSON report fields keep their spelling.
      camelcase: ['error', { properties: 'never', allow: ['Q4_0'] }],
      // One way to write private state: #name (a private constructor stays TypeScript's).
      'no-restricted-syntax': ['error',
        { selector: 'PropertyDefinition[accessibility="private"]', message: 'write private state as #name' },
        { selector: 'MethodDefinition[accessibility="private"][kind!="constructor"]', message: 'write private methods as #name' },
        { selector: 'TSParameterProperty[accessibility="private"]', message: 'declare the field as #name and assign it' },
      ],
    },
  },
]
